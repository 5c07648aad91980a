"""A fixed-window call counter per host or team, in the Django cache (shared by every web
worker). Cheap enough to run before any database write, so one caller's flood is refused without
costing the others. It fails open: while the cache is unreachable every call is allowed (the
limits protect capacity; heartbeats and submissions must not stop with the cache)."""

from __future__ import annotations

import time

from django.core.cache import cache, caches
from django.core.cache.backends.redis import RedisCache
from redis import Redis

from common.cache_outage import CACHE_ERRORS, warn


def _window(scope: str, key: str, window_s: int) -> tuple[str, int]:
    """The cache key of the current window and the seconds until it resets."""
    now = time.time()
    window = int(now // window_s)
    return (f"benchmarks:rate:{scope}:{key}:{window}",
            max(1, int((window + 1) * window_s - now)))


def window_key(scope: str, key: str, window_s: int) -> tuple[str, int]:
    """The cache key holding this key's count for the current window (read it with the cache's
    get/get_many; it may be absent) and the seconds until the window resets."""
    return _window(scope, key, window_s)


def allow(scope: str, key: str, limit: int, window_s: int) -> tuple[bool, int]:
    """Count one call. Returns (allowed, seconds until the window resets)."""
    cache_key, retry_after = _window(scope, key, window_s)
    try:
        count = _count(cache_key, window_s)
    except CACHE_ERRORS as exc:
        warn(f"{scope} rate limit not applied", exc)
        return True, retry_after
    return count <= limit, retry_after


def allow_weighted(scope: str, key: str, weight: int, limit: int,
                   window_s: int) -> tuple[bool, int]:
    """Count `weight` units (bytes, say) at once; allowed while the window's total, this call
    included, is at most `limit`. Same window, failing open and return as allow()."""
    cache_key, retry_after = _window(scope, key, window_s)
    try:
        count = _count(cache_key, window_s, max(0, int(weight)))
    except CACHE_ERRORS as exc:
        warn(f"{scope} rate limit not applied", exc)
        return True, retry_after
    return count <= limit, retry_after


def allow_unless_over(scope: str, key: str, limit: int, window_s: int,
                      over_scope: str, over_key: str, over_limit: int,
                      over_window_s: int) -> tuple[int | None, bool, int]:
    """over(over_scope, …) and allow(scope, …) in one cache round trip (with Redis):
    (seconds until the first counter's window resets if it is over its limit, else None;
    allowed; seconds until the second's window resets). The call is counted either way: the
    caller refuses it when the first is not None. Fails open as both do."""
    over_cache_key, over_retry = _window(over_scope, over_key, over_window_s)
    cache_key, retry_after = _window(scope, key, window_s)
    client = _redis_client()
    if client is None:
        return over(over_scope, over_key, over_limit, over_window_s), *allow(
            scope, key, limit, window_s)
    try:
        checked = cache.make_and_validate_key(over_cache_key)
        counted = cache.make_and_validate_key(cache_key)
        pipe = client.pipeline(transaction=False)
        pipe.get(checked)
        pipe.set(counted, 0, ex=window_s + 1, nx=True)
        pipe.incr(counted, 1)
        seen, _, count = pipe.execute()
    except CACHE_ERRORS as exc:
        warn(f"{scope} rate limit not applied", exc)
        return None, True, retry_after
    blocked = over_retry if seen is not None and int(seen) >= over_limit else None
    return blocked, count <= limit, retry_after


def over(scope: str, key: str, limit: int, window_s: int) -> int | None:
    """Whether `limit` calls have already been counted (by allow()) for this key in the
    current window, counting nothing: the seconds until it resets if so, else None (also
    while the cache is unreachable: fail open, like allow())."""
    cache_key, retry_after = _window(scope, key, window_s)
    try:
        count = cache.get(cache_key) or 0  # Django's Redis serializer reads an INCR's integer
    except CACHE_ERRORS as exc:
        warn(f"{scope} limit not checked", exc)
        return None
    return retry_after if int(count) >= limit else None


def _count(cache_key: str, window_s: int, weight: int = 1) -> int:
    client = _redis_client()
    if client is not None:
        # One round trip: create the window's counter with its expiry unless it exists, then
        # count. (Django's cache.incr is two round trips and builds a new Redis client each
        # call: more than half the CPU of a heartbeat.)
        key = cache.make_and_validate_key(cache_key)
        pipe = client.pipeline(transaction=False)
        pipe.set(key, 0, ex=window_s + 1, nx=True)
        pipe.incr(key, weight)
        return pipe.execute()[1]
    try:
        return cache.incr(cache_key, weight)  # one round trip in the common case
    except ValueError:  # first call of this window
        if cache.add(cache_key, weight, timeout=window_s + 1):
            return weight
        return cache.incr(cache_key, weight)  # another worker created it between our two calls


def _redis_client() -> Redis | None:
    """The Redis client under Django's cache when it is Redis (else None), kept on the cache
    backend object (one per thread, replaced when the settings change), so every call reuses
    it and its connection pool."""
    backend = caches["default"]
    if not isinstance(backend, RedisCache):
        return None
    client = getattr(backend, "_tokvera_rate_client", None)
    if client is None:
        client = backend._cache.get_client(write=True)  # Django's RedisCacheClient
        backend._tokvera_rate_client = client  # type: ignore[attr-defined]
    return client
