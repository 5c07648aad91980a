"""Failed token authentications, limited per client address: team tokens (tkv_…) and host
tokens (tkh_…) alike.

Every failed check (a malformed, unknown, wrong, revoked or expired token) is counted for the
address it came from; once an address has failed AUTH_FAILURE_LIMIT times in a window of
AUTH_FAILURE_WINDOW_S, each further failure from it is answered 429 with Retry-After instead of
401, until the window ends. Failures are refused, credentials that check out never are: a
valid token is answered from any address, over the limit or not (behind a NAT or a proxy
whose other clients guess, it would otherwise be locked out by strangers).

A flood's cost stays bounded: a guess costs the token's lookup by its prefix (one indexed
read, the HMAC compared in constant time) and one cache round trip only until its address
reaches AUTH_FAILURE_CEILING_MULTIPLE times the limit in the window; past that ceiling a token
is looked up only when it checked out recently (mark_valid, from every successful check, for
one window), and any other is answered 429 after one cache read and no database work. So a
fresh valid token is served from a blocked address below the ceiling, and one already in use
(a host's, an integration's) at any count. A malformed token costs only a cache round trip.

The address is the client's as common/client_address.py reads it (TRUSTED_PROXY_COUNT),
the same as for sign-in throttling.
"""

from __future__ import annotations

from django.conf import settings
from django.core.cache import cache
from django.http import HttpRequest
from django.utils.crypto import salted_hmac
from rest_framework import exceptions

from common import client_address, ratelimit
from common.cache_outage import CACHE_ERRORS, warn

SCOPE = "auth-failure"
# Past this many times AUTH_FAILURE_LIMIT failures in a window, an address's tokens are looked
# up only when they checked out recently (refused_unlooked).
AUTH_FAILURE_CEILING_MULTIPLE = 10


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


def _valid_mark(token: str) -> str:
    # Keyed by the whole token under a salt of its own: garbage sent with a valid token's
    # public prefix does not carry the mark, and the key reveals neither the token nor its
    # stored digest.
    return "auth-valid:" + salted_hmac("tokvera.auth-valid-mark", token,
                                       algorithm="sha256").hexdigest()


def mark_valid(token: str) -> None:
    """After `token` checked out: look it up from an address past its ceiling for one window
    more. Fails open (no mark) while the cache is unreachable: then nothing is refused unlooked
    either."""
    try:
        cache.set(_valid_mark(token), 1, timeout=_limit("AUTH_FAILURE_WINDOW_S"))
    except CACHE_ERRORS as exc:
        warn("valid token not marked", exc)


def refused_unlooked(address: str, token: str) -> int | None:
    """For a well-formed `token` from `address`, before any database work: the seconds to
    answer 429 with when it must be refused without a lookup (the address is past its ceiling
    and the token has not checked out within a window), else None: look it up, serve it if
    valid, count it with failed()/record() if not. One cache round trip, counting nothing."""
    limit = _limit("AUTH_FAILURE_LIMIT")
    counter, retry_after = ratelimit.window_key(SCOPE, address or "unknown",
                                                _limit("AUTH_FAILURE_WINDOW_S"))
    mark = _valid_mark(token)
    try:
        found = cache.get_many([counter, mark])
    except CACHE_ERRORS as exc:
        warn("failed authentications not checked", exc)
        return None
    failures = int(found.get(counter) or 0)
    if failures < limit * AUTH_FAILURE_CEILING_MULTIPLE or mark in found:
        return None
    return retry_after


def throttled(retry_after: int) -> exceptions.Throttled:
    """The 429 for a failure from an address over its limit (DRF adds the wait to `detail`
    and sets Retry-After)."""
    return exceptions.Throttled(wait=retry_after, detail=message())


def refuse_unlooked(request: HttpRequest, token: str) -> None:
    """For DRF authenticators, before the token's lookup: raise the 429 of refused_unlooked."""
    retry_after = refused_unlooked(client_address.of_request(request), token)
    if retry_after is not None:
        raise throttled(retry_after)


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


def failed(request: HttpRequest, detail: str) -> exceptions.APIException:
    """For DRF authenticators, once a token failed its check: count the failure and give what
    to raise, 401 with `detail` or, over the limit, 429 (Throttled, with Retry-After)."""
    retry_after = record(client_address.of_request(request))
    if retry_after is not None:
        return throttled(retry_after)
    return exceptions.AuthenticationFailed(detail)
