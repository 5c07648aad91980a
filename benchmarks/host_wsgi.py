"""The host calls' lean path: answered in front of Django's middleware (tokvera_site/wsgi.py).

Host calls are most of the network's traffic: every host heartbeats every 15 s, and a busy
host's slot sends one call per job (a completion that leases the next job) or waits in a lease.
Through Django's middleware stack (sessions, CSRF, messages, axes, Prometheus, host validation),
its URL resolver and DRF's request, negotiation and serializers, the framework cost more than
the work. This WSGI wrapper answers these itself and hands every other request to Django
unchanged:

    POST /v1/hosts/heartbeat        every request (benchmarks.heartbeat.answer_heartbeat, which
                                    the Django view calls too, answers each case)
    POST /v1/hosts/lease            only well-formed requests from a valid host token that is
    POST /v1/jobs/{id}/complete     within its limits (benchmarks.host_calls says what is
    POST /v1/jobs/complete          well-formed); every other one goes to the DRF views, which
                                    answer each mistake as they always have.

A job call costs the same work either way: one cache round trip (the address's failed
authentications, and for a lease its rate limit too) before the token is looked up, then the
same service call (benchmarks.services) and the same answer (benchmarks.host_calls).

What the middleware did that still matters is done here: a body size limit (read only after the
token's form passed, for a heartbeat), the security headers that apply to a JSON answer
(nosniff, no framing, no referrer), no caching, and counting the call (Prometheus:
tokvera_host_heartbeats, tokvera_host_job_calls). The Host header is not checked against
ALLOWED_HOSTS: a bearer-token call whose answer names no URL gives a forged Host nothing to
poison.

The database connection is handed back after each call (Django's CONN_MAX_AGE and pool rules)
without a health-check query per call: a connection the server dropped fails the statement,
which is closed and retried once on a fresh connection (only a lost connection: a statement
timeout is not run twice). A retry is harmless: a heartbeat recorded twice, a lease that found
nothing the first time (counted once, waiting only what is left of its wait), a completion that
repeats (a repeated completion answers what the first one did: benchmarks.services.complete).
"""

from __future__ import annotations

import io
import json
import logging
import time
from collections.abc import Callable, Iterable
from http import HTTPStatus

from django.db import InterfaceError, OperationalError, connection
from prometheus_client import Counter
from rest_framework.renderers import JSONRenderer

from accounts import credentials
from benchmarks import host_calls, hosts, jobs, policy, services
from benchmarks.heartbeat import answer_heartbeat
from common import auth_failures, client_address, errors, parsers

HEARTBEAT = "/v1/hosts/heartbeat"
LEASE = "/v1/hosts/lease"
COMPLETE_MANY = "/v1/jobs/complete"
_COMPLETE = ("/v1/jobs/", "/complete")  # around the job's id
HEARTBEATS = Counter("tokvera_host_heartbeats", "Host heartbeats answered, by HTTP status", ["status"])
JOB_CALLS = Counter("tokvera_host_job_calls",
                    "Host lease and complete calls answered in front of Django, by HTTP status",
                    ["call", "status"])
# A completion's result is at most 1 MB as JSON; its body a little more. A longer one (or one
# without Content-Length) goes to Django, which refuses it or reads it under its own limits.
JOB_CALL_MAX_BYTES = host_calls.MAX_RESULT_BYTES + 64 * 1024
# What Django's middleware adds to a JSON answer that a caller could rely on.
JSON_HEADERS = [("X-Content-Type-Options", "nosniff"), ("X-Frame-Options", "DENY"),
                ("Referrer-Policy", "same-origin"), ("Cross-Origin-Opener-Policy", "same-origin"),
                ("Cache-Control", "no-store")]
# What DRF adds to a host view's answer (APIView.default_response_headers; no Vary: Accept, as
# host views have one renderer).
_DRF_HEADERS = [("Allow", "POST, OPTIONS")]
log = logging.getLogger("django.request")

Answer = tuple[int, dict | list | None, dict[str, str]]


class HostFastPath:
    def __init__(self, django_app: Callable) -> None:
        self.django_app = django_app

    def __call__(self, environ: dict, start_response: Callable) -> Iterable[bytes]:
        if environ.get("REQUEST_METHOD") != "POST":
            return self.django_app(environ, start_response)
        path = environ.get("PATH_INFO", "")
        work: Callable[[], Answer | None] | None
        if path == HEARTBEAT:
            call, work = "heartbeat", _heartbeat_work(environ)
        elif (job_call := _job_call(path)) is not None:
            call, work = job_call[0], _job_work(*job_call, environ)
        else:
            return self.django_app(environ, start_response)
        answer = None if work is None else answer_safely(work)
        if answer is None:  # not provably well-formed, or refused: Django answers it
            return self.django_app(environ, start_response)
        status, payload, headers = answer
        if call == "heartbeat":
            HEARTBEATS.labels(status=str(status)).inc()
        else:
            JOB_CALLS.labels(call=call, status=str(status)).inc()
        # The bytes Django would answer: a DRF view's answers through DRF's renderer (its dates,
        # separators, raw UTF-8) with the headers DRF adds; the heartbeat's view and Django's
        # outage and error answers (JsonResponse) through json.dumps.
        drf = call != "heartbeat" and status < 500
        if payload is None:
            body = b""
        else:
            body = JSONRenderer().render(payload) if drf else json.dumps(payload).encode()
        head = [("Content-Type", "application/json")] if payload is not None else []
        start_response(f"{status} {HTTPStatus(status).phrase}", [
            *head, ("Content-Length", str(len(body))), *JSON_HEADERS, *(_DRF_HEADERS if drf else []),
            *headers.items()])
        return [body]


def answer_safely(work: Callable[[], Answer | None]) -> Answer | None:
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
        return 503, errors.OUTAGE_BODY, {"Retry-After": str(errors.OUTAGE_RETRY_AFTER_S)}
    except Exception:
        log.exception("host call failed")
        return 500, {"detail": "Internal server error.", "code": "server_error"}, {}
    finally:
        _after_request()


def _heartbeat_work(environ: dict) -> Callable[[], Answer]:
    read = _BodyReader(environ)  # one for both tries: the retry gets the same bytes
    return lambda: answer_heartbeat(environ.get("HTTP_AUTHORIZATION", ""), read,
                                    client_address.of_environ(environ))


def _job_call(path: str) -> tuple[str, str | None] | None:
    """(call, job id) for a job call this path serves, else None."""
    if path == LEASE:
        return "lease", None
    if path == COMPLETE_MANY:
        return "complete_many", None
    start, end = _COMPLETE
    if path.startswith(start) and path.endswith(end):
        job_id = path[len(start):-len(end)]
        if host_calls.JOB_ID.fullmatch(job_id):
            return "complete", job_id
    return None


def _job_work(call: str, job_id: str | None, environ: dict) -> Callable[[], Answer | None] | None:
    """For a well-formed job call from a caller within its limits, the work that answers it
    (which gives None when the token turns out unknown); for any other request, None.

    The limits come first, in one cache round trip and before the body is read: a call from an
    address over its failure limit goes to Django, whose authenticator answers its token (a
    valid one is served there, a failure refused with 429), unless the address is past its
    ceiling and the token has not checked out within the window: then it is answered 429 here,
    after one more cache read and no database work (common/auth_failures.py). A lease is
    counted here once (the retry after a dropped connection does not count it again); one this
    path hands to Django is counted there too (DRF counts a lease before it reads the body)."""
    token = credentials.split_bearer(environ.get("HTTP_AUTHORIZATION", ""), hosts.TOKEN_KIND)
    if token is None or not _negotiates_json(environ):
        return None
    address = client_address.of_environ(environ)
    if call == "lease":
        blocked_for, allowed, _ = auth_failures.blocked_then_count(
            address, "lease", host_calls.lease_limit_key(token),
            policy.value("NETWORK_LEASE_LIMIT"), policy.value("NETWORK_LEASE_WINDOW_S"))
        if not allowed:
            return None
    else:
        blocked_for = auth_failures.blocked(address)
    if blocked_for is not None:
        if (refused_for := auth_failures.refused_unlooked(address, token)) is not None:
            return lambda: _auth_refused(refused_for)
        return None
    data = _json_body(environ, empty_is={} if call == "lease" else None)
    if data is _NOT_SERVED:
        return None
    if call == "lease":
        options = host_calls.lease_options(data)
        return None if options is None else _lease(token, options)
    if call == "complete":
        completion = host_calls.completion_options(data)
        return None if completion is None else _complete(token, job_id, completion)
    parsed = host_calls.completions_options(data)
    return None if parsed is None else lambda: _complete_many(token, *parsed)


def _auth_refused(retry_after: int) -> Answer:
    """What DRF answers the authenticator's Throttled with: its detail (the wait added) and
    Retry-After."""
    return 429, {"detail": auth_failures.throttled(retry_after).detail}, {
        "Retry-After": str(retry_after)}


def _negotiates_json(environ: dict) -> bool:
    """No query string (DRF reads ?format=) and an Accept header that DRF answers with its
    compact JSON; anything else DRF negotiates itself (406, indented JSON, HTML)."""
    accept = environ.get("HTTP_ACCEPT", "")
    return not environ.get("QUERY_STRING") and accept in ("", "*/*", "application/json")


def _wait_left(wait_s: float) -> Callable[[], float]:
    """What is left of a call's wait when it is served (a retry waits only the rest)."""
    deadline = time.monotonic() + wait_s
    return lambda: max(0.0, deadline - time.monotonic()) if wait_s else 0.0


def _lease(token: str, options: host_calls.LeaseOptions) -> Callable[[], Answer | None]:
    wait_left = _wait_left(options.wait_s)

    def serve() -> Answer | None:
        host = hosts.authenticate(token)
        if host is None:
            return None
        auth_failures.mark_valid(token)
        job = services.lease(host, start=options.start, wait_s=wait_left())
        return (204, None, {}) if job is None else (200, host_calls.job_for_host(job), {})
    return serve


def _complete(token: str, job_id, completion: host_calls.Completion) -> Callable[[], Answer | None]:
    wait_left = _wait_left(completion.wait_s)

    def serve() -> Answer | None:
        host = hosts.authenticate(token)
        if host is None:
            return None
        auth_failures.mark_valid(token)
        try:
            job, following = services.complete(
                host, job_id, completion.figures, completion.result,
                lease_next=completion.lease_next, wait_s=wait_left())
        except jobs.JobError as exc:
            status, body = host_calls.job_error(exc)
            return status, body, {}
        return 200, host_calls.completed(job, following, completion.lease_next), {}
    return serve


def _complete_many(token: str, reports: list, lease_next: bool) -> Answer | None:
    host = hosts.authenticate(token)
    if host is None:
        return None
    auth_failures.mark_valid(token)
    settled, following = services.complete_many(host, reports, lease_next=lease_next)
    return 200, host_calls.completed_many([job_id for job_id, _, _ in reports], settled,
                                          following, lease_next), {}


_NOT_SERVED = object()
_JSON_TYPES = ("application/json", "application/json; charset=utf-8")


def _json_body(environ: dict, empty_is: dict | None) -> object:
    """The request's JSON body, parsed under the API parser's rules, or _NOT_SERVED when the
    fast path leaves the request to Django (no declared length, over the limit, not JSON).
    The bytes read are put back, so Django can read them again. A lease that is not JSON
    asks for nothing (`empty_is`), as the view reads it."""
    content_type = environ.get("CONTENT_TYPE", "")
    if empty_is is not None and not content_type.startswith("application/json"):
        return empty_is
    if content_type.lower() not in _JSON_TYPES:
        return _NOT_SERVED
    try:
        length = int(environ.get("CONTENT_LENGTH") or "")
    except ValueError:
        return _NOT_SERVED
    if length < 0 or length > JOB_CALL_MAX_BYTES:
        return _NOT_SERVED
    raw = environ["wsgi.input"].read(length)
    environ["wsgi.input"] = io.BytesIO(raw)
    if not raw:
        return _NOT_SERVED if empty_is is None else empty_is
    try:
        text = raw.decode("utf-8")  # as DRF's parser reads it: strictly, a BOM is no JSON
    except UnicodeDecodeError:
        return _NOT_SERVED
    if text.startswith("\ufeff"):
        return _NOT_SERVED
    try:
        return parsers.loads(text)
    except ValueError:
        return _NOT_SERVED


def _connection_lost() -> bool:
    raw = connection.connection
    return raw is None or raw.closed or raw.broken


def _after_request() -> None:
    """What Django's request_finished does for the connection, minus the health check."""
    expired = connection.close_at is not None and time.monotonic() >= connection.close_at
    if connection.connection is not None and (expired or connection.errors_occurred
                                              or connection.in_atomic_block):
        connection.close()


class _BodyReader:
    """Reads the request body once, at most `limit` bytes (None: longer, or a malformed
    length); the retry after a dropped connection gets the same bytes."""

    def __init__(self, environ: dict) -> None:
        self.environ = environ
        self.done = False
        self.body: bytes | None = None

    def __call__(self, limit: int) -> bytes | None:
        if not self.done:
            self.body, self.done = _read_body(self.environ, limit), True
        return self.body


def _read_body(environ: dict, limit: int) -> bytes | None:
    stream = environ["wsgi.input"]
    declared = environ.get("CONTENT_LENGTH") or ""
    if not declared:
        raw = stream.read(limit + 1)  # chunked or no length: read up to the limit
        return raw if len(raw) <= limit else None
    try:
        length = int(declared)
    except ValueError:
        return None
    if length < 0 or length > limit:
        return None
    return stream.read(length)
