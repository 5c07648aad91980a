"""What the shared cache raises when it cannot be reached, in one place.

The cache is Redis (CACHE_URL=redis://…) or the database (the default); either can be down while
the rest of the site is up. Code that must keep working through such an outage (host heartbeats
and leases, the public benchmark pages) catches exactly these, logs one warning, and fails open
or falls back; everything else lets them propagate.
"""

from __future__ import annotations

import logging

from django.db import Error as DatabaseError
from redis.exceptions import RedisError

CACHE_ERRORS: tuple[type[BaseException], ...] = (RedisError, DatabaseError, OSError)

log = logging.getLogger("benchmarks.cache")


def warn(what: str, exc: BaseException) -> None:
    log.warning("cache unavailable (%s: %s): %s", type(exc).__name__, exc, what)
