"""The host heartbeat, whatever serves it: the Django view (benchmarks/api.py) or, under gunicorn,
the WSGI fast path in front of Django's middleware (benchmarks/host_wsgi.py). Both call
`answer_heartbeat`, which holds the whole protocol: the token's form, the failed-authentication
limit of the address, the host's own rate limit, the body's size and fields, and recording it.
No DRF here: the fast path must not import the API views."""

from __future__ import annotations

from collections.abc import Callable

from accounts import credentials
from benchmarks import hosts, policy, services
from common import auth_failures, parsers


def parse_body(raw: bytes) -> dict:
    """The heartbeat's fields, checked as strictly as the API's serializers check numbers (a
    JSON number, never a string or a boolean); raises ValueError with a message for the caller."""
    data = parsers.loads(raw or b"null")  # the API parser's rules; UnacceptableJSON is a ValueError
    if not isinstance(data, dict):
        raise ValueError("expected a JSON object")
    models = data.get("models")
    if not isinstance(models, list) or len(models) > 64 or not all(
            isinstance(m, str) and 0 < len(m.strip()) <= 64 for m in models):
        raise ValueError("models: a list of at most 64 catalog ids")
    hardware = data.get("hardware", {})
    if not isinstance(hardware, dict):
        raise ValueError("hardware: expected an object")
    checked = {}
    for name, kind in hosts.HARDWARE_FIELDS.items():
        if name not in hardware:
            continue
        value = hardware[name]
        if kind is str and not (isinstance(value, str) and len(value.strip()) <= 100):
            raise ValueError(f"hardware.{name}: at most 100 characters")
        if kind is int and not _whole(value, 0, 2**31 - 1):
            raise ValueError(f"hardware.{name}: a whole number from 0 to {2**31 - 1}")
        checked[name] = value.strip() if kind is str else int(value)
    slots = data.get("slots", 1)
    limit = policy.value("NETWORK_MAX_SLOTS")
    if not _whole(slots, 1, limit):
        raise ValueError(f"slots: a whole number from 1 to {limit}")
    return {"models": [m.strip() for m in models], "hardware": checked, "slots": int(slots)}


def _whole(value, low: int, high: int) -> bool:
    """A JSON number that is whole and within [low, high] (never a string or a boolean)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return (isinstance(value, int) or value.is_integer()) and low <= value <= high


HEARTBEAT_MAX_BYTES = 64 * 1024  # 64 catalog ids and the hardware fit many times over


def answer_heartbeat(authorization: str, read_body: Callable[[int], bytes | None],
                     address: str, steady_tried: bool = False) -> tuple[int, dict, dict[str, str]]:
    """The heartbeat call, whatever serves it: (status, JSON body, extra headers).

    The most frequent call of the network: for a steady host within its limit, one UPDATE and
    nothing else; no DRF request, negotiation or serializer. Every other call takes one cache
    round trip (the address's failed authentications and the token's rate limit together)
    before any write. The body is read after the token's form passed, at most
    HEARTBEAT_MAX_BYTES of it (`read_body(limit)` gives None for a longer one). Failed
    authentications are counted per `address` (the client's: common/client_address.py),
    and a failure from an address over that limit is answered 429; a valid token is answered
    from any address (its token is checked before the refusal). `steady_tried`: the caller already tried
    the steady UPDATE for this call (the heartbeat server's batch), so it is not tried again.
    """
    if not authorization:
        return 401, {"detail": "Authentication credentials were not provided."}, _CHALLENGE
    token = credentials.split_bearer(authorization, hosts.TOKEN_KIND)
    if token is None:
        if (blocked_for := auth_failures.record(address)) is not None:
            return _blocked(blocked_for)
        return 401, {"detail": "Malformed host token."}, _CHALLENGE
    limit = policy.value("NETWORK_HEARTBEAT_LIMIT")
    window = policy.value("NETWORK_HEARTBEAT_WINDOW_S")
    # A steady host: one UPDATE and no cache round trip. The rate limit is folded into its
    # condition: it writes only when the host's last heartbeat is at least window / limit old
    # (3 s by default; the agent sends one every 15 s), so a host that never calls faster
    # than that can never be over its limit and needs no counter. Anything else (a bad token,
    # a changed model list, a call sooner than that, a body that does not parse) writes
    # nothing here and takes the full path below, which counts it as before.
    not_within_s = steady_within_s()
    steady = (_steady(token, read_body, not_within_s)
              if not_within_s is not None and not steady_tried else None)
    if steady is not None:
        return steady
    # Counted before any database write, per token digest: only the token's holder can spend
    # a host's allowance (keyed by the public prefix, a stranger sending garbage with that
    # prefix kept the real host offline). Garbage tokens fail and count against their address,
    # which is checked in the same round trip (a blocked address's call still counts for
    # its token: only the token's holder can send it). From a blocked address only a token
    # that checks out goes on: one indexed read, no body read, no write for garbage; past the
    # address's ceiling, only a token that checked out within the window is looked up at all.
    blocked_for, allowed, retry_after = auth_failures.blocked_then_count(
        address, "heartbeat", credentials.digest(token), limit, window)
    if blocked_for is not None and (
            auth_failures.refused_unlooked(address, token) is not None
            or hosts.authenticate(token) is None):
        return _blocked(blocked_for)
    if not allowed:
        return 429, {"detail": f"Too many heartbeat calls from this host: at most {limit} per "
                     f"{window} s.", "code": "rate_limited"}, {"Retry-After": str(retry_after)}
    raw_body = read_body(HEARTBEAT_MAX_BYTES)
    if raw_body is None:
        return 400, {"detail": f"A heartbeat body is at most {HEARTBEAT_MAX_BYTES} bytes."}, {}
    try:
        body = parse_body(raw_body)
    except ValueError as exc:
        return 400, {"detail": str(exc)}, {}
    try:
        recorded = services.heartbeat(token, body["models"], body["hardware"], body["slots"])
    except hosts.UnknownModels as exc:
        # Well formed, but names what the catalog does not have: 422, as the API answers it.
        return 422, {"detail": str(exc), "unknown_models": exc.ids}, {}
    if recorded is None:
        if (blocked_for := auth_failures.record(address)) is not None:
            return _blocked(blocked_for)
        return 401, {"detail": "Invalid or revoked host token."}, _CHALLENGE
    auth_failures.mark_valid(token)
    return 200, answer_body(recorded), {}


def _steady(token: str, read_body: Callable[[int], bytes | None],
            not_within_s: float) -> tuple[int, dict, dict[str, str]] | None:
    raw_body = read_body(HEARTBEAT_MAX_BYTES)
    if raw_body is None:
        return None
    try:
        body = parse_body(raw_body)
    except ValueError:
        return None  # the full path answers it, after the token and the limits
    recorded = services.steady_heartbeat(token, body["models"], body["hardware"], body["slots"],
                                         not_within_s)
    return None if recorded is None else (200, answer_body(recorded), {})


def steady_within_s() -> float | None:
    """A steady heartbeat is one at least this long after the host's last (the rate limit
    folded into the UPDATE: window / limit); None when heartbeats are not limited."""
    limit = policy.value("NETWORK_HEARTBEAT_LIMIT")
    return policy.value("NETWORK_HEARTBEAT_WINDOW_S") / limit if limit > 0 else None


def answer_body(recorded: hosts.Heartbeat) -> dict:
    return {
        "online": recorded.online,
        "heartbeat_interval_s": policy.value("NETWORK_HEARTBEAT_INTERVAL_S"),
        "models": recorded.models,
        "slots": recorded.slots,
        "trust_level": recorded.trust_level,
        "suspended": recorded.suspended,
    }


def _blocked(retry_after: int) -> tuple[int, dict, dict[str, str]]:
    return 429, {"detail": auth_failures.message(), "code": "auth_rate_limited"}, {
        "Retry-After": str(retry_after)}


# What HostTokenAuthentication answers on the DRF host calls (its `keyword`).
_CHALLENGE = {"WWW-Authenticate": "Bearer"}
