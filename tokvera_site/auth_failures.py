"""Failed token authentications, limited per client address: team tokens (tkv_…) and host
tokens (tkh_…) alike.

Every failed check (a malformed, unknown, wrong, revoked or expired token) is counted for the
address it came from; once an address has failed AUTH_FAILURE_LIMIT times in a window of
AUTH_FAILURE_WINDOW_S, every token call from it is answered 429 with Retry-After
before any database work, until the window ends. A caller that holds a good token never fails,
so it is never counted; a stranger guessing tokens, or flooding with a real token's prefix,
costs one cache read per call once blocked.

The address is REMOTE_ADDR, as for sign-in throttling (tokvera_site/login_throttle.py): a header
such as X-Forwarded-For is the caller's to forge. Behind a proxy, have the proxy set it.
"""

from __future__ import annotations

from django.conf import settings
from rest_framework import exceptions

from tokvera_site import ratelimit

SCOPE = "auth-failure"


def _limit(name: str) -> int:
    return getattr(settings, name)  # AUTH_FAILURE_LIMIT, AUTH_FAILURE_WINDOW_S (settings.py)


def blocked(address: str) -> int | None:
    """Seconds until `address` may try again, or None when it is not over the limit."""
    return ratelimit.over(SCOPE, address or "unknown", _limit("AUTH_FAILURE_LIMIT"),
                          _limit("AUTH_FAILURE_WINDOW_S"))


def blocked_then_count(address: str, scope: str, key: str, limit: int,
                       window_s: int) -> tuple[int | None, bool, int]:
    """blocked(address) and ratelimit.allow(scope, key, …) in one cache round trip (the
    heartbeat's): (blocked for, allowed, retry after)."""
    return ratelimit.allow_unless_over(scope, key, limit, window_s, SCOPE, address or "unknown",
                                       _limit("AUTH_FAILURE_LIMIT"),
                                       _limit("AUTH_FAILURE_WINDOW_S"))


def record(address: str) -> None:
    """Count one failed authentication from `address`."""
    ratelimit.allow(SCOPE, address or "unknown", _limit("AUTH_FAILURE_LIMIT"),
                    _limit("AUTH_FAILURE_WINDOW_S"))


def message() -> str:
    return (f"Too many failed authentications from this address: at most "
            f"{_limit('AUTH_FAILURE_LIMIT')} per {_limit('AUTH_FAILURE_WINDOW_S')} s.")


def refuse_if_blocked(request) -> None:
    """For DRF authenticators: raise 429 (Throttled, with Retry-After) when the request's
    address is over the limit."""
    retry_after = blocked(request.META.get("REMOTE_ADDR", ""))
    if retry_after is not None:
        raise exceptions.Throttled(wait=retry_after, detail=message())


def failed(request, detail: str) -> exceptions.AuthenticationFailed:
    """Count the request's failure and give the 401 to raise."""
    record(request.META.get("REMOTE_ADDR", ""))
    return exceptions.AuthenticationFailed(detail)
