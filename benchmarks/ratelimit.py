"""A fixed-window call counter per host, in the Django cache (shared by every web worker when
the cache is Redis). Cheap enough to run before any database write, so one host's flood is
refused without costing the others."""

from __future__ import annotations

import time

from django.core.cache import cache


def allow(scope: str, key: str, limit: int, window_s: int) -> tuple[bool, int]:
    """Count one call. Returns (allowed, seconds until the window resets)."""
    now = time.time()
    window = int(now // window_s)
    cache_key = f"benchmarks:rate:{scope}:{key}:{window}"
    try:
        count = cache.incr(cache_key)  # one round trip in the common case
    except ValueError:  # first call of this window
        if cache.add(cache_key, 1, timeout=window_s + 1):
            count = 1
        else:  # another worker created it between our two calls
            count = cache.incr(cache_key)
    retry_after = max(1, int((window + 1) * window_s - now))
    return count <= limit, retry_after
