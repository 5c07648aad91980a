"""The host calls' protocol: every answer a host gets, as (status, JSON body, headers), for
whatever serves the call: the Django views (benchmarks/network/host_api.py), the WSGI fast path
in front of Django's middleware (benchmarks/network/host_wsgi.py) or the host-call server under
uvicorn (benchmarks/network/host_call_server.py). The adapters only read the request and write
these answers as bytes.

- The heartbeat: `answer_heartbeat` holds it all (the token's form, the address's failed
  authentications, the host's rate limit, the body's size and fields, recording it).
- The job calls: `read_job_call` reads a call's body (host_bodies.py: what DRF's serializers
  accept, refused in their words) and gives what answers it for an authenticated host
  (`lease_answer`, `start_answer`, `complete_answer`, `complete_many_answer`, `fail_answer`);
  the DRF views return that. In front of Django, `job_call_answer` adds what DRF does before
  the view (the token, as HostTokenAuthentication answers it; the lease's rate limit) and so
  answers every job call that DRF would answer in its compact JSON; what stays DRF's is the
  adapter's to say (host_wsgi.py). A server on an event loop asks it not to wait in its
  thread (`waits_on_loop`): a lease that would wait is then answered as a LeaseWait, which
  that server waits out on its loop.
- Whatever the database does: `answer_safely` (a dropped connection retried once, an outage
  answered 503, anything else 500).

No DRF views here: the fast paths must not import the API views (host_bodies.py borrows
only DRF's field messages, so a refusal reads as the serializers word it).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, TypeVar, overload

from django.db import InterfaceError, OperationalError, connection
from prometheus_client import Counter

from accounts import credentials
from benchmarks import policy
from benchmarks.models import Host, Job
from benchmarks.network import host_bodies as bodies
from benchmarks.network import hosts, jobs, services
from common import auth_failures, errors, ratelimit

Answer = tuple[int, dict | list | None, dict[str, str]]
T = TypeVar("T")

HEARTBEAT = "/v1/hosts/heartbeat"
# Counted by the adapters that answer it in front of Django (the WSGI path, the host-call server).
HEARTBEATS = Counter("tokvera_host_heartbeats", "Host heartbeats answered, by HTTP status", ["status"])
# What Django's middleware adds to a JSON answer that a caller could rely on.
JSON_HEADERS = [("X-Content-Type-Options", "nosniff"), ("X-Frame-Options", "DENY"),
                ("Referrer-Policy", "same-origin"), ("Cross-Origin-Opener-Policy", "same-origin"),
                ("Cache-Control", "no-store")]
# The site's answer while the database is unreachable (common/errors.py), on every path.
OUTAGE: Answer = (503, errors.OUTAGE_BODY, {"Retry-After": str(errors.OUTAGE_RETRY_AFTER_S)})
# A job call's body the WSGI path leaves to Django (no length, too long, not JSON's type).
NOT_SERVED = object()
log = logging.getLogger("django.request")


# --- the heartbeat -----------------------------------------------------------------------------


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
    the steady UPDATE for this call (the host-call server's batch), so it is not tried again.
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
        body = bodies.heartbeat_fields(raw_body)
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
        body = bodies.heartbeat_fields(raw_body)
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


# --- the job calls -----------------------------------------------------------------------------


def job_for_host(job: Job) -> dict:
    """A job as the host that runs it receives it (lease, and `next` after a completion)."""
    return {
        "id": str(job.id),
        "status": job.status,  # "running" when the lease asked to start it
        "model": job.model_id,
        "messages": job.request_json.get("messages", []),
        "max_tokens": job.max_tokens,
        "attempt": job.attempts,
        "lease_expires_at": job.lease_expires_at,
    }


def job_state(job: Job) -> dict:
    """A job's state after a host call changed it (start, complete, fail)."""
    return {
        "id": str(job.id),
        "status": job.status,
        "started_at": job.started_at,
        "settled_at": job.settled_at,
        "lease_expires_at": job.lease_expires_at,
        "failure_reason": job.failure_reason or None,
    }


def job_error(exc: jobs.JobError) -> tuple[int, dict]:
    """The status and body a refused job call answers."""
    if isinstance(exc, jobs.NotYourJob):
        return 404, {"detail": "Not found."}
    if isinstance(exc, jobs.JobConflict):
        return 409, {"detail": str(exc)}
    return 400, {"detail": str(exc)}


def completed(job: Job, following: Job | None, lease_next: bool) -> dict:
    """The answer to /complete: the job's state, and with lease_next the next job or None."""
    answer = job_state(job)
    if lease_next:
        answer["next"] = None if following is None else job_for_host(following)
    return answer


def completed_many(job_ids: list, settled: list[Job | jobs.JobError], following: list[Job],
                   lease_next: bool) -> dict:
    """The answer to POST /v1/jobs/complete: each report's state, or its error in its place
    (the status /complete would have answered), and with lease_next the next jobs."""
    answer: dict = {"jobs": [job_state(item) if isinstance(item, Job) else _item_error(job_id, item)
                             for job_id, item in zip(job_ids, settled, strict=True)]}
    if lease_next:
        answer["next"] = [job_for_host(job) for job in following]
    return answer


def _item_error(job_id, exc: jobs.JobError) -> dict:
    status, body = job_error(exc)
    return {"id": str(job_id), "error": {"status": status, "detail": body["detail"]}}


def lease_limit_key(token: str) -> str:
    """The key the lease's rate limit counts a host's calls under: its token's digest, which
    (unlike the host's id) is known before the database says whose token it is, so the fast
    path counts the call and checks the caller's address in one cache round trip before any
    database work. Only the token's holder can spend it."""
    return credentials.digest(token)


def lease_limited(authorization: str) -> Answer | None:
    """The lease's rate limit as the DRF view counts it (before the body is read), under the key
    the WSGI path counts it under (`lease_limit_key`), so both paths spend one allowance: 429
    when over it, else None."""
    limit, window = policy.value("NETWORK_LEASE_LIMIT"), policy.value("NETWORK_LEASE_WINDOW_S")
    token = credentials.split_bearer(authorization, hosts.TOKEN_KIND)
    allowed, retry_after = ratelimit.allow("lease", lease_limit_key(token or ""), limit, window)
    return None if allowed else _lease_limit_reached(retry_after)


def _lease_limit_reached(retry_after: int) -> Answer:
    limit, window = policy.value("NETWORK_LEASE_LIMIT"), policy.value("NETWORK_LEASE_WINDOW_S")
    return 429, {"detail": f"Too many lease calls from this host: at most {limit} per {window} s.",
                 "code": "rate_limited"}, {"Retry-After": str(retry_after)}


@overload
def job_call_answer(call: str, job_id: str | None, authorization: str, address: str,
                    read_json: Callable[[], object],
                    waits_on_loop: Literal[False] = False) -> Callable[[], Answer] | None: ...
@overload
def job_call_answer(call: str, job_id: str | None, authorization: str, address: str,
                    read_json: Callable[[], object],
                    waits_on_loop: bool) -> Callable[[], Answer | LeaseWait] | None: ...
def job_call_answer(call: str, job_id: str | None, authorization: str, address: str,
                    read_json: Callable[[], object],
                    waits_on_loop: bool = False) -> Callable[[], Answer | LeaseWait] | None:
    """In front of Django: the work that answers a job call (`call`: lease, start, complete,
    complete_many or fail) as the DRF view does, or None for a body this path leaves to
    Django. `read_json()` gives the body's JSON, a Malformed (the parser's 400) or NOT_SERVED;
    it is not called for a start, whose view reads no body.

    The limits come first, in one cache round trip and before the body is read: a lease is
    counted here once (the retry after a dropped connection does not count it again; DRF
    counts a lease before it reads the body), and a call from an address past its failure
    ceiling whose token has not checked out within the window is answered 429 after one more
    cache read and no database work (common/auth_failures.py). Then, in the work, what DRF
    does in its order: authenticate, the lease's rate limit, the body. `waits_on_loop`: a
    lease (or lease_next) that would wait is answered as a LeaseWait instead."""
    token = credentials.split_bearer(authorization, hosts.TOKEN_KIND)
    allowed, retry_after, blocked_for = True, 0, None
    if token is not None and call == "lease":
        blocked_for, allowed, retry_after = auth_failures.blocked_then_count(
            address, "lease", lease_limit_key(token),
            policy.value("NETWORK_LEASE_LIMIT"), policy.value("NETWORK_LEASE_WINDOW_S"))
    elif token is not None:
        blocked_for = auth_failures.blocked(address)
    if token is not None and blocked_for is not None and (
            refused_for := auth_failures.refused_unlooked(address, token)) is not None:
        return lambda: _auth_refused(refused_for)
    data = {} if call == "start" else read_json()
    if data is NOT_SERVED:
        return None
    answer_for = (read_job_call(call, job_id, data, waits_on_loop)
                  if not isinstance(data, bodies.Malformed) else _malformed(data))

    def serve() -> Answer | LeaseWait:
        host = authenticate(authorization, address)
        if not isinstance(host, Host):
            return host
        if not allowed:
            return _lease_limit_reached(retry_after)
        return answer_for(host)
    return serve


@overload
def read_job_call(call: str, job_id, data: object,
                  waits_on_loop: Literal[False] = False) -> Callable[[Host], Answer]: ...
@overload
def read_job_call(call: str, job_id, data: object,
                  waits_on_loop: bool) -> Callable[[Host], Answer | LeaseWait]: ...
def read_job_call(call: str, job_id, data: object,
                  waits_on_loop: bool = False) -> Callable[[Host], Answer | LeaseWait]:
    """A job call's body (parsed JSON; a lease's {} when it sent none) read once: what answers
    it for an authenticated host, or its 400 (host_bodies.py: DRF's words). Read when the call
    arrives: a wait counts from then, so a retry waits only what is left of it."""
    try:
        if call == "lease":
            options = bodies.lease_options(data)
            lease_wait = _wait_left(options.wait_s)
            return lambda host: lease_answer(host, options.start, lease_wait(), waits_on_loop)
        if call == "start":
            return lambda host: start_answer(host, job_id)
        if call == "complete":
            done = bodies.completion_options(data)
            wait = _wait_left(done.wait_s)
            return lambda host: complete_answer(host, job_id, done.figures, done.result,
                                                done.lease_next, wait(), waits_on_loop)
        if call == "complete_many":
            reports, lease_next = bodies.completions_options(data)
            return lambda host: complete_many_answer(host, reports, lease_next)
        reason = bodies.failure_reason(data)
        return lambda host: fail_answer(host, job_id, reason)
    except bodies.Malformed as exc:
        return _malformed(exc)


def _malformed(exc: bodies.Malformed) -> Callable[[Host], Answer | LeaseWait]:
    return lambda host: (400, exc.detail, {})


def authenticate(authorization: str, address: str) -> Host | Answer:
    """The host of a job call's token, or the answer HostTokenAuthentication gives without one
    (401 with the Bearer challenge; 429 from an address over its failure limit). The refusal
    without a lookup came before (job_call_answer), as it does in the authenticator."""
    if not authorization:
        return 401, {"detail": "Authentication credentials were not provided."}, _CHALLENGE
    token = credentials.split_bearer(authorization, hosts.TOKEN_KIND)
    if token is None:
        return _auth_failed(address, "Malformed host token.")
    host = hosts.authenticate(token)
    if host is None:
        return _auth_failed(address, "Invalid or revoked host token.")
    auth_failures.mark_valid(token)
    return host


def _auth_failed(address: str, detail: str) -> Answer:
    if (retry_after := auth_failures.record(address)) is not None:
        return _auth_refused(retry_after)
    return 401, {"detail": detail}, _CHALLENGE


def _auth_refused(retry_after: int) -> Answer:
    """What DRF answers the authenticator's Throttled with: its detail (the wait added) and
    Retry-After."""
    return 429, {"detail": auth_failures.throttled(retry_after).detail}, {
        "Retry-After": str(retry_after)}


def _wait_left(wait_s: float) -> Callable[[], float]:
    """What is left of a call's wait when it is served (a retry waits only the rest)."""
    deadline = time.monotonic() + wait_s
    return lambda: max(0.0, deadline - time.monotonic()) if wait_s else 0.0


# --- each job call's answer, for an authenticated host and a well-formed body --------------------


@dataclass(frozen=True)
class LeaseWait:
    """A lease (or a completion's lease_next) that found no job and may wait for one, handed to
    a server that waits on its event loop instead of in a thread (host_call_server.py): it
    waits for the host's wake-up as wakeup.wait would, runs `look` on a database thread after
    each, and answers `answer(job)` with what a look found, or `answer(None)` after `seconds`."""

    host_id: int
    seconds: float  # left of the call's wait
    look: Callable[[], Job | None]  # one more try: services.lease's own look
    answer: Callable[[Job | None], Answer]


class _NotedWait:
    """A services.Wait that does not wait: it notes the wait for the caller's event loop."""

    def __init__(self) -> None:
        self.noted: tuple[int, float, Callable[[], Job | None]] | None = None

    def __call__(self, host_id: int, seconds: float, look: Callable[[], Job | None],
                 most: int) -> Job | None:
        self.noted = (host_id, seconds, look)
        return None

    def then(self, answer: Callable[[Job | None], Answer]) -> LeaseWait | None:
        return None if self.noted is None else LeaseWait(*self.noted, answer)


def lease_answer(host: Host, start: bool, wait_s: float,
                 waits_on_loop: bool = False) -> Answer | LeaseWait:
    noted = _NotedWait()
    job = services.lease(host, start=start, wait_s=wait_s,
                         wait=noted if waits_on_loop else services.wait_in_thread)
    return noted.then(_leased) or _leased(job)


def _leased(job: Job | None) -> Answer:
    return (204, None, {}) if job is None else (200, job_for_host(job), {})


def start_answer(host: Host, job_id) -> Answer:
    try:
        job = services.start(host, job_id)
    except jobs.JobError as exc:
        return _refused(exc)
    return 200, job_state(job), {}


def complete_answer(host: Host, job_id, figures: jobs.Figures, result: object, lease_next: bool,
                    wait_s: float, waits_on_loop: bool = False) -> Answer | LeaseWait:
    noted = _NotedWait()
    try:
        job, following = services.complete(
            host, job_id, figures, result, lease_next=lease_next, wait_s=wait_s,
            wait=noted if waits_on_loop else services.wait_in_thread)
    except jobs.JobError as exc:
        return _refused(exc)
    return noted.then(lambda found: (200, completed(job, found, lease_next), {})) or (
        200, completed(job, following, lease_next), {})


def complete_many_answer(host: Host, reports: list, lease_next: bool) -> Answer:
    settled, following = services.complete_many(host, reports, lease_next=lease_next)
    return 200, completed_many([job_id for job_id, _, _ in reports], settled, following,
                               lease_next), {}


def fail_answer(host: Host, job_id, reason: str) -> Answer:
    try:
        job = services.fail(host, job_id, reason)
    except jobs.JobError as exc:
        return _refused(exc)
    return 200, job_state(job), {}


def _refused(exc: jobs.JobError) -> Answer:
    status, body = job_error(exc)
    return status, body, {}


# --- an answer whatever happens to the database ------------------------------------------------


def answer_safely(work: Callable[[], T | None]) -> T | Answer | None:
    """`work()`, retried once on a fresh connection when the database dropped this one; a
    database still unreachable is the outage answer (503), anything else raised a 500."""
    try:
        try:
            return work()
        except (InterfaceError, OperationalError):
            if not _connection_lost():
                raise  # e.g. a statement timeout: not run twice
            # Dropped by the server since the last call: once more on a fresh connection.
            connection.close()
            return work()
    except (InterfaceError, OperationalError):  # still unreachable after the retry
        log.warning("host call: the database is unreachable")
        return OUTAGE
    except Exception:
        log.exception("host call failed")
        return 500, {"detail": "Internal server error.", "code": "server_error"}, {}
    finally:
        _after_request()


def _connection_lost() -> bool:
    raw = connection.connection
    return raw is None or raw.closed or raw.broken


def _after_request() -> None:
    """What Django's request_finished does for the connection, minus the health check."""
    expired = connection.close_at is not None and time.monotonic() >= connection.close_at
    if connection.connection is not None and (expired or connection.errors_occurred
                                              or connection.in_atomic_block):
        connection.close()
