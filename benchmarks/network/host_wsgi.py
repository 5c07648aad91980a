"""The host calls' WSGI adapter: answered in front of Django's middleware (tokvera_site/wsgi.py).

Host calls are most of the network's traffic: every host heartbeats every 15 s, and a busy
host's slot sends one call per job (a completion that leases the next job) or waits in a lease.
Through Django's middleware stack (sessions, CSRF, messages, axes, Prometheus, host validation),
its URL resolver and DRF's request, negotiation and serializers, the framework cost more than
the work. This WSGI wrapper answers these itself and hands every other request to Django
unchanged:

    POST /v1/hosts/heartbeat        every request (host_protocol.answer_heartbeat, which the
                                    Django view calls too, answers each case)
    POST /v1/hosts/lease            every request DRF would answer in its compact JSON
    POST /v1/jobs/{id}/start        (host_protocol.job_call_answer, whose answers the DRF
    POST /v1/jobs/{id}/complete     views return too: the token's refusals, the lease's rate
    POST /v1/jobs/{id}/fail         limit, a malformed body in DRF's words, the answer)
    POST /v1/jobs/complete

Left to Django, which answers them as it always has: another method (DRF's 405 and OPTIONS),
a query string or an Accept header other than JSON (DRF's content negotiation: 406, indented
JSON), a body of another content type than JSON in UTF-8 or without a declared length or over
JOB_CALL_MAX_BYTES (DRF's parsers and their 415, Django's upload limits), and an id the URL's
converter would not match (Django's 404).

The answers are the protocol's (benchmarks/network/host_protocol.py); this module reads the
request from the WSGI environ and writes the answer's bytes as Django and DRF would.

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
repeats (a repeated completion answers what the first one did: benchmarks.network.services.complete).
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterable
from http import HTTPStatus

from prometheus_client import Counter
from rest_framework.exceptions import ParseError
from rest_framework.renderers import JSONRenderer

from benchmarks.network import host_bodies
from benchmarks.network import host_protocol as protocol
from benchmarks.network.host_protocol import (
    HEARTBEAT,
    HEARTBEATS,
    JSON_HEADERS,
    NOT_SERVED,
    Answer,
    answer_safely,
)
from common import client_address, parsers

LEASE = "/v1/hosts/lease"
COMPLETE_MANY = "/v1/jobs/complete"
_JOBS = "/v1/jobs/"  # then the job's id, then one of these calls
_ON_A_JOB = ("start", "complete", "fail")
JOB_CALLS = Counter("tokvera_host_job_calls",
                    "Host job calls answered in front of Django, by HTTP status",
                    ["call", "status"])
# A completion's result is at most 1 MB as JSON; its body a little more. A longer one (or one
# without Content-Length) goes to Django, which refuses it or reads it under its own limits.
JOB_CALL_MAX_BYTES = host_bodies.MAX_RESULT_BYTES + 64 * 1024
# What DRF adds to a host view's answer (APIView.default_response_headers; no Vary: Accept, as
# host views have one renderer).
DRF_HEADERS = [("Allow", "POST, OPTIONS")]


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
        elif (job_call := job_call_of(path)) is not None:
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
            *head, ("Content-Length", str(len(body))), *JSON_HEADERS, *(DRF_HEADERS if drf else []),
            *headers.items()])
        return [body]


def _heartbeat_work(environ: dict) -> Callable[[], Answer]:
    read = _BodyReader(environ)  # one for both tries: the retry gets the same bytes
    return lambda: protocol.answer_heartbeat(environ.get("HTTP_AUTHORIZATION", ""), read,
                                    client_address.of_environ(environ))


def job_call_of(path: str) -> tuple[str, str | None] | None:
    """(call, job id) for a job call this path serves, else None."""
    if path == LEASE:
        return "lease", None
    if path == COMPLETE_MANY:
        return "complete_many", None
    job_id, _, call = path.removeprefix(_JOBS).partition("/")
    if path.startswith(_JOBS) and call in _ON_A_JOB and host_bodies.JOB_ID.fullmatch(job_id):
        return call, job_id
    return None


def _job_work(call: str, job_id: str | None, environ: dict) -> Callable[[], Answer] | None:
    """The protocol's work for a job call that DRF would answer with its compact JSON, else None."""
    if not negotiates_json(environ):
        return None
    return protocol.job_call_answer(call, job_id, environ.get("HTTP_AUTHORIZATION", ""),
                                    client_address.of_environ(environ),
                                    lambda: json_body(environ, lease=call == "lease"))


def negotiates_json(environ: dict) -> bool:
    """No query string (DRF reads ?format=) and an Accept header that DRF answers with its
    compact JSON; anything else DRF negotiates itself (406, indented JSON, HTML)."""
    accept = environ.get("HTTP_ACCEPT", "")
    return not environ.get("QUERY_STRING") and accept in ("", "*/*", "application/json")


_JSON_TYPES = ("application/json", "application/json; charset=utf-8")


def json_body(environ: dict, lease: bool) -> object:
    """The request's data as DRF's request gives it to the view: the JSON parsed by the API's
    parser ({} for an empty body; its ParseError as a Malformed), or NOT_SERVED when this path
    leaves the request to Django (no declared length, over the limit, a content type other
    than JSON in UTF-8, whose parsing or 415 is DRF's). The bytes read are put back, so Django
    can read them again. A lease that is not JSON asks for nothing, as the view reads it."""
    content_type = environ.get("CONTENT_TYPE", "")
    if lease and not content_type.startswith("application/json"):
        return {}
    if content_type.lower() not in _JSON_TYPES:
        return NOT_SERVED
    try:
        length = int(environ.get("CONTENT_LENGTH") or "")
    except ValueError:
        return NOT_SERVED
    if length < 0 or length > JOB_CALL_MAX_BYTES:
        return NOT_SERVED
    raw = environ["wsgi.input"].read(length)
    environ["wsgi.input"] = io.BytesIO(raw)
    if not raw:
        return {}  # DRF's request data without a body
    try:
        return parsers.StrictJSONParser().parse(io.BytesIO(raw), "application/json",
                                                {"encoding": "utf-8"})
    except ParseError as exc:  # answered after the token, as DRF reads the body after it
        return host_bodies.Malformed({"detail": exc.detail})


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
