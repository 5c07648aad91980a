"""Failed token authentications, limited per client address: team tokens (tkv_…) and host
tokens (tkh_…) alike.

Every failed check (a malformed, unknown, wrong, revoked or expired token) is counted for the
address it came from; once an address has failed AUTH_FAILURE_LIMIT times in a window of
AUTH_FAILURE_WINDOW_S, each further failure from it is answered 429 with Retry-After instead of
401, until the window ends. Failures are refused, credentials that check out never are: a
valid token is answered from any address, over the limit or not (behind a NAT or a proxy
whose other clients guess, it would otherwise be locked out by strangers). A guess costs the
token's lookup by its prefix (one indexed read, the HMAC compared in constant time) and one
cache round trip; a malformed token only the cache round trip.

The address is the client's as tokvera_site/client_address.py reads it (TRUSTED_PROXY_COUNT),
the same as for sign-in throttling.
"""

from __future__ import annotations

from django.conf import settings
from rest_framework import exceptions

from tokvera_site import client_address, ratelimit

SCOPE = "auth-failure"


def _limit(name: str) -> int:
    return getattr(settings, name)  # AUTH_FAILURE_LIMIT, AUTH_FAILURE_WINDOW_S (settings.py)


def blocked(address: str) -> int | None:
    """Seconds until `address` is under the limit again, or None when it is not over it,
    counting nothing. Only a failure may be refused on it: check the token first."""
    return ratelimit.over(SCOPE, address or "unknown", _limit("AUTH_FAILURE_LIMIT"),
                          _limit("AUTH_FAILURE_WINDOW_S"))


def blocked_then_count(address: str, scope: str, key: str, limit: int,
                       window_s: int) -> tuple[int | None, bool, int]:
    """blocked(address) and ratelimit.allow(scope, key, …) in one cache round trip (the
    heartbeat's): (blocked for, allowed, retry after)."""
    return ratelimit.allow_unless_over(scope, key, limit, window_s, SCOPE, address or "unknown",
                                       _limit("AUTH_FAILURE_LIMIT"),
                                       _limit("AUTH_FAILURE_WINDOW_S"))


def record(address: str) -> int | None:
    """Count one failed authentication from `address`: the seconds until the window ends when
    this failure is over the limit (answer 429), else None (answer 401)."""
    allowed, retry_after = ratelimit.allow(SCOPE, address or "unknown",
                                           _limit("AUTH_FAILURE_LIMIT"),
                                           _limit("AUTH_FAILURE_WINDOW_S"))
    return None if allowed else retry_after


def message() -> str:
    return (f"Too many failed authentications from this address: at most "
            f"{_limit('AUTH_FAILURE_LIMIT')} per {_limit('AUTH_FAILURE_WINDOW_S')} s.")


def failed(request, detail: str) -> exceptions.APIException:
    """For DRF authenticators, once a token failed its check: count the failure and give what
    to raise, 401 with `detail` or, over the limit, 429 (Throttled, with Retry-After)."""
    retry_after = record(client_address.of_request(request))
    if retry_after is not None:
        return exceptions.Throttled(wait=retry_after, detail=message())
    return exceptions.AuthenticationFailed(detail)
