"""The host-call server: the calls of the network's hosts, served by an asyncio server.

    uvicorn tokvera_site.host_calls_asgi:application --loop uvloop --http httptools

It answers what a host sends and nothing else (404 for any other path):

    POST /v1/hosts/heartbeat        steady ones written in batches (heartbeat_batches.py)
    POST /v1/hosts/lease            a lease that finds no job waits on the event loop
    POST /v1/jobs/{id}/start
    POST /v1/jobs/{id}/complete     with lease_next, waits as a lease does
    POST /v1/jobs/{id}/fail
    POST /v1/jobs/complete

Hosts are most of the network's traffic: every host heartbeats every 15 s (10,000 hosts are 667
calls a second, all day) and a busy host's slot sends a call or two per job. Under gunicorn
(host_wsgi.py) most of each call's web CPU went to HTTP parsing and to hand-offs between
hundreds of threads, most of them parked in waiting leases. Here uvicorn's HTTP (httptools, in
C) and one event loop serve them; the database work runs on DATABASE_THREADS threads (Django's
ORM and cache are synchronous), and a call waiting for work holds no thread: it awaits its
host's wake-up (wakeup.wait_on_loop) between looks. Route these paths here at the proxy,
everything else to the web process (docs/operations.md).

Every answer is the protocol's (host_protocol.py), with the bytes host_wsgi.py writes and the
Django views answer (tests/benchmarks/network/test_heartbeat_server.py and
test_host_call_server.py):
- Heartbeats: a steady one (a current token, an unchanged model list, not within window /
  limit of the host's last) is answered from its batch's row; every other takes the full path,
  `answer_heartbeat` on a database thread, told that the steady UPDATE was already tried. The
  body is read only once the token has the form of one, as under gunicorn; 405 for another
  method, as Django's require_POST.
- Job calls: `job_call_answer` on a database thread (the limits' cache round trip, the token,
  the body, the work). What host_wsgi.py leaves to Django (another method, a query string, an
  Accept header other than JSON, a body of another type, without a length or over
  JOB_CALL_MAX_BYTES, an id the URL would not match) goes to Django's own ASGI application in
  this process, which answers it as the site does.
- A lease (or a completion with lease_next) that finds nothing and asked to wait is tried
  once on a thread, as services.lease tries (its clocks, a pass queued); then the call waits on
  the loop for its host's wake-up or what is left of its wait, looking again on a thread after
  each (every wakeup.POLL_S while Redis cannot announce). NETWORK_WAITING_LEASES_PER_PROCESS
  counts the calls of this process waiting so at once: beyond it a call looks once more and
  answers, as under gunicorn (the agent then polls). A waiting call costs no thread here, only
  memory and a look per wake-up, so this process's value can be far higher than a gunicorn
  worker's (docs/operations.md).
- A caller that goes away while its call waits stops waiting at once: it leaves its host's
  wake-up list and its place among the waiting calls, and no further look runs for it. A look
  already running finishes; a job it took then is the expiry sweep's, as is any answer lost
  on the way.

Failures: a batch the database could not write answers each of its calls with the site's
outage answer (503, Retry-After), as the other paths do; any other batch error sends each
call down the full path. Floods are bounded: past WAITING_MAX calls waiting for a batch, or
THREADS_WAITING_MAX on or queued for the database threads, a call is answered 503 at once
(Retry-After) instead of queueing without end.

The failed authentications' limit counts the client address as the site reads it
everywhere (common/client_address.py: TRUSTED_PROXY_COUNT says which hop of
X-Forwarded-For is the client). Run uvicorn with --no-proxy-headers, so that the connection's
own address is what it falls back to, not uvicorn's reading of the header (docs/operations.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from django.core.asgi import get_asgi_application
from django.db import connection
from django.utils import timezone
from rest_framework.renderers import JSONRenderer

from accounts import credentials
from benchmarks import policy
from benchmarks.network import host_bodies, hosts, wakeup
from benchmarks.network import host_protocol as protocol
from benchmarks.network.heartbeat_batches import (
    BatchFailed,
    Busy,
    DatabaseUnreachable,
    SteadyWriter,
)
from benchmarks.network.host_protocol import (
    HEARTBEAT,
    HEARTBEATS,
    JSON_HEADERS,
    OUTAGE,
    Answer,
    LeaseWait,
    answer_safely,
)
from benchmarks.network.host_wsgi import (
    DRF_HEADERS,
    JOB_CALL_MAX_BYTES,
    JOB_CALLS,
    job_call_of,
    json_body,
    negotiates_json,
)
from common import client_address

log = logging.getLogger("django.request")
T = TypeVar("T")

# Threads for the database work (a job call, a waiting lease's look, a heartbeat that is not
# steady): each holds a database connection while it works, so keep it small. Python runs one
# of them at a time; more would only overlap more waits on PostgreSQL and Redis.
DATABASE_THREADS = 8
# Calls on or queued for those threads, at most (a flood of bad tokens); past it, BUSY.
THREADS_WAITING_MAX = 400
BUSY: Answer = (503, {"detail": "Too many heartbeats at once; try again shortly.", "code": "busy"},
                {"Retry-After": "5"})
JOB_CALLS_BUSY: Answer = (503, {"detail": "Too many host calls at once; try again shortly.",
                                "code": "busy"}, {"Retry-After": "5"})
_ENCODED_HEADERS = [(name.lower().encode(), value.encode()) for name, value in JSON_HEADERS]
_ENCODED_DRF_HEADERS = [(name.lower().encode(), value.encode()) for name, value in DRF_HEADERS]
_LEFT_TO_DJANGO = object()  # a job call host_wsgi.py would hand to Django


class HostCallApp:
    """The ASGI application (tokvera_site/host_calls_asgi.py builds it). `django_app`: what
    answers the job calls this server leaves to Django (Django's ASGI application)."""

    def __init__(self, writer: SteadyWriter, django_app: Callable | None = None) -> None:
        self.writer = writer
        self.django_app = django_app or get_asgi_application()
        self._threads = ThreadPoolExecutor(DATABASE_THREADS, thread_name_prefix="host-calls")
        self._threads_waiting = 0
        self._leases_waiting = 0

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        path = scope["path"]
        if path == HEARTBEAT:
            await self._heartbeat(scope, receive, send)
        elif (job_call := job_call_of(path)) is not None or path.startswith(_JOB_PATHS):
            await self._job_call(job_call, scope, receive, send)
        else:
            await _send(send, 404, {"detail": "Not found. This server answers host calls only "
                                    f"(POST {HEARTBEAT}, /v1/hosts/lease, /v1/jobs/…)."}, {})

    # --- heartbeats ---------------------------------------------------------------------------

    async def _heartbeat(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["method"] != "POST":  # Django's require_POST: an empty 405
            await send({"type": "http.response.start", "status": 405, "headers": [
                (b"content-type", b"text/html; charset=utf-8"), (b"content-length", b"0"),
                (b"allow", b"POST"), *_ENCODED_HEADERS]})
            await send({"type": "http.response.body", "body": b""})
            return
        authorization = _header(scope, b"authorization")
        body = None
        if credentials.split_bearer(authorization, hosts.TOKEN_KIND) is not None:
            body = await _read_body(scope, receive, protocol.HEARTBEAT_MAX_BYTES)
            if body is _GONE:
                return  # the caller went away mid-body: nobody to answer, nothing to count
        address = client_address.of_scope(scope)
        status, payload, headers = await self.heartbeat_answer(authorization, body, address)
        HEARTBEATS.labels(status=str(status)).inc()
        await _send(send, status, payload, headers)

    async def heartbeat_answer(self, authorization: str, body: bytes | None,
                               address: str) -> Answer:
        """What the Django view would answer the heartbeat `body` (None: longer than the limit,
        or unread because the token has no token's form) from `address`."""
        if not authorization:  # answered without any I/O: no thread needed
            return protocol.answer_heartbeat("", lambda limit: None, address)
        steady_tried = False
        token = credentials.split_bearer(authorization, hosts.TOKEN_KIND)
        not_within_s = protocol.steady_within_s()
        if token is not None and not_within_s is not None and body is not None:
            try:
                fields = host_bodies.heartbeat_fields(body)
            except ValueError:
                fields = None  # the full path answers it, after the token and the limits
            if fields is not None:
                call = hosts.SteadyCall(token, fields["models"], fields["hardware"],
                                        fields["slots"], timezone.now(), not_within_s)
                try:
                    recorded = await self.writer.record(call)
                except DatabaseUnreachable:
                    log.warning("heartbeat: the database is unreachable")
                    return OUTAGE
                except Busy:
                    return BUSY
                except BatchFailed:
                    recorded = None  # the full path tries this call alone
                else:
                    steady_tried = True
                if recorded is not None:
                    return 200, protocol.answer_body(recorded), {}
        if self._threads_waiting >= THREADS_WAITING_MAX:
            return BUSY

        def full_path() -> Answer | None:
            return protocol.answer_heartbeat(authorization, lambda limit: body, address,
                                              steady_tried=steady_tried)

        answered = await self._on_a_thread(answer_safely, full_path)
        assert answered is not None  # noqa: S101 - answer_heartbeat always answers
        return answered

    # --- job calls ----------------------------------------------------------------------------

    async def _job_call(self, job_call: tuple[str, str | None] | None, scope: dict,
                        receive: Callable, send: Callable) -> None:
        environ = _environ(scope)
        if job_call is None or scope["method"] != "POST" or not negotiates_json(environ):
            await self.django_app(scope, receive, send)  # DRF's 405, Django's 404, negotiation
            return
        call, job_id = job_call
        body = None  # unread: no declared length, or over the limit (then left to Django)
        declared = environ["CONTENT_LENGTH"]
        if declared.isdigit() and int(declared) <= JOB_CALL_MAX_BYTES:
            body = await _read_body(scope, receive, JOB_CALL_MAX_BYTES)
            if body is _GONE:
                return  # the caller went away mid-body: nobody to answer
        environ["wsgi.input"] = io.BytesIO(body or b"")
        if self._threads_waiting >= THREADS_WAITING_MAX:
            answer: Answer | LeaseWait | object = JOB_CALLS_BUSY
        else:
            answer = await self._on_a_thread(_job_call_answer, call, job_id, environ)
        if answer is _LEFT_TO_DJANGO:
            await self.django_app(scope, receive if body is None else _replaying(body, receive),
                                  send)
            return
        if isinstance(answer, LeaseWait):
            answer = await self._unless_gone(self._wait(answer), receive)
            if answer is None:
                return  # the caller went away while it waited: nobody to answer, nothing to count
        assert isinstance(answer, tuple)  # noqa: S101 - an Answer from here on
        status, payload, headers = answer
        JOB_CALLS.labels(call=call, status=str(status)).inc()
        await _send(send, status, payload, headers, drf=status < 500)

    async def _wait(self, wait: LeaseWait) -> Answer:
        """The lease's wait, on the loop: woken by its host's wake-ups, a look on a thread after
        each; beyond NETWORK_WAITING_LEASES_PER_PROCESS calls waiting, one look and no wait."""
        def look_once() -> Answer | None:
            found = wait.look()
            return None if found is None else wait.answer(found)

        async def look() -> Answer | None:
            # A look already running finishes even when its caller goes away (shielded).
            return await asyncio.shield(self._on_a_thread(answer_safely, look_once))

        if self._leases_waiting >= policy.value("NETWORK_WAITING_LEASES_PER_PROCESS"):
            found = await look()
        else:
            self._leases_waiting += 1
            try:
                found = await wakeup.wait_on_loop(wait.host_id, wait.seconds, look)
            finally:
                self._leases_waiting -= 1
        return found or wait.answer(None)

    async def _unless_gone(self, work: Coroutine[object, object, Answer],
                           receive: Callable) -> Answer | None:
        """`work`'s answer, or None when the caller disconnects first (`work` is cancelled)."""
        working = asyncio.ensure_future(work)
        gone = asyncio.ensure_future(_disconnected(receive))
        try:
            await asyncio.wait({working, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
        if working.done():
            return working.result()
        working.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await working
        return None

    async def _on_a_thread(self, function: Callable[..., T], *args: object) -> T:
        """`function(*args)` on a database thread, counted until it returns; a caller cancelled
        meanwhile stops counting while its thread still works (the thread finishes on its own)."""
        self._threads_waiting += 1
        try:
            return await asyncio.get_running_loop().run_in_executor(self._threads, function, *args)
        finally:
            self._threads_waiting -= 1

    # --- the process --------------------------------------------------------------------------

    async def _lifespan(self, receive: Callable, send: Callable) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.close()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def close(self) -> None:
        """Closes the batches' connection and each database thread's Django connection."""
        await self.writer.close()
        # One task per thread, each held at the barrier until all are, so every thread closes
        # its own; a thread still busy past the timeout is left to exit with the process.
        barrier = threading.Barrier(DATABASE_THREADS, timeout=10)
        loop = asyncio.get_running_loop()
        await asyncio.gather(*(loop.run_in_executor(self._threads, _close_connection, barrier)
                               for _ in range(DATABASE_THREADS)), return_exceptions=True)
        self._threads.shutdown(wait=False)


# Every path a job call's URL may take (the buyer's calls are the web's, not these).
_JOB_PATHS = ("/v1/jobs/", "/v1/hosts/lease")


def _job_call_answer(call: str, job_id: str | None, environ: dict) -> Answer | LeaseWait | object:
    """On a database thread: the protocol's answer, a LeaseWait, or _LEFT_TO_DJANGO."""
    work = protocol.job_call_answer(call, job_id, environ.get("HTTP_AUTHORIZATION", ""),
                                    client_address.of_environ(environ),
                                    lambda: json_body(environ, lease=call == "lease"),
                                    waits_on_loop=True)
    if work is None:
        return _LEFT_TO_DJANGO
    answered = answer_safely(work)
    assert answered is not None  # noqa: S101 - job calls always answer
    return answered


def _environ(scope: dict) -> dict:
    """What host_wsgi.py's readers take from a WSGI environ, from the ASGI scope (the body is
    put in wsgi.input once read)."""
    return {"HTTP_AUTHORIZATION": _header(scope, b"authorization"),
            "HTTP_ACCEPT": _header(scope, b"accept"),
            "QUERY_STRING": scope.get("query_string", b"").decode("latin-1"),
            "CONTENT_TYPE": _header(scope, b"content-type"),
            "CONTENT_LENGTH": _header(scope, b"content-length"),
            "REMOTE_ADDR": (scope.get("client") or ("",))[0],
            "HTTP_X_FORWARDED_FOR": _header(scope, b"x-forwarded-for")}


def _replaying(body: bytes, receive: Callable) -> Callable:
    """`receive` as if the body already read had not been: it comes first, then the rest."""
    replayed = False

    async def again() -> dict:
        nonlocal replayed
        if replayed:
            return await receive()
        replayed = True
        return {"type": "http.request", "body": body, "more_body": False}
    return again


async def _disconnected(receive: Callable) -> None:
    """Returns when the caller has gone (the request's body, if any is left, is skipped)."""
    while (await receive())["type"] != "http.disconnect":
        pass


def _close_connection(barrier: threading.Barrier) -> None:
    try:
        barrier.wait()
    finally:  # a thread still busy past the barrier's timeout breaks it for all: close anyway
        connection.close()


def _header(scope: dict, name: bytes) -> str:
    """A request header's value; repeated ones joined with commas, as WSGI servers join them."""
    return ",".join(value.decode("latin-1") for key, value in scope["headers"] if key == name)


_GONE = b"\0gone"  # a marker no read body can be: the caller disconnected


async def _read_body(scope: dict, receive: Callable, limit: int) -> bytes | None:
    """The body, None when it is longer than `limit` (then not read further), or _GONE."""
    declared = _header(scope, b"content-length")
    if declared.isdigit() and int(declared) > limit:
        return None
    chunks, size, more = [], 0, True
    while more:
        message = await receive()
        if message["type"] == "http.disconnect":
            return _GONE
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        more = message.get("more_body", False)
    return b"".join(chunks)


async def _send(send: Callable, status: int, payload: dict | list | None, headers: dict[str, str],
                drf: bool = False) -> None:
    """As the WSGI fast path answers (host_wsgi.py): a DRF view's answers (`drf`) through DRF's
    renderer with the headers DRF adds, the heartbeat's and the outage's as JsonResponse does;
    Django's headers on every one."""
    if payload is None:
        body, head = b"", []
    else:
        body = JSONRenderer().render(payload) if drf else json.dumps(payload).encode()
        head = [(b"content-type", b"application/json")]
    await send({"type": "http.response.start", "status": status, "headers": [
        *head, (b"content-length", str(len(body)).encode()), *_ENCODED_HEADERS,
        *(_ENCODED_DRF_HEADERS if drf else []),
        *((name.lower().encode(), value.encode()) for name, value in headers.items())]})
    await send({"type": "http.response.body", "body": body})
