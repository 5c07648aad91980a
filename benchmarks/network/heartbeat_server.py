"""The heartbeat's ASGI adapter: host heartbeats served by an asyncio server, written to the
database in batches.

    uvicorn tokvera_site.heartbeats_asgi:application --loop uvloop --http httptools

Every host heartbeats every 15 s: 10,000 hosts are 667 calls a second, all day, and the
network's most frequent call by far. Under gunicorn (host_wsgi.py) most of each one's web CPU
goes to HTTP parsing and thread hand-offs in Python. Here uvicorn's HTTP (httptools, in C) and
one event loop serve them, and the steady heartbeats that arrive while one write runs go to the
database together in the next: one statement for the whole batch (heartbeat_batches.py), which
costs PostgreSQL a fraction of one statement per call.

This server answers `POST /v1/hosts/heartbeat` and nothing else (404; 405 for another method
on that path, as Django's): route that path here at the proxy, everything else to the web
process. A steady heartbeat (a current token, an unchanged model list, not within window /
limit of the host's last: host_protocol.py) is answered from its batch's row. Every other call
takes the same full path as under gunicorn, `answer_heartbeat` on one of a few threads
(Django's ORM and cache are synchronous), which answers each case as the view does, with the
same bytes (tests/benchmarks/network/test_heartbeat_server.py). The body is read only once the
token has the form of one, as under gunicorn.

Failures: a batch the database could not write (heartbeat_batches.py says when) answers every
call of the batch with the site's outage answer (503, Retry-After), as the other paths do. Any
other error sends each call of the batch down the full path, which answers it on its own.
Floods are bounded: past WAITING_MAX calls waiting for a batch, or FULL_PATH_WAITING_MAX for the
threads, a call is answered 503 at once (Retry-After) instead of queueing without end.

The failed authentications' limit counts the client address as the site reads it
everywhere (common/client_address.py: TRUSTED_PROXY_COUNT says which hop of
X-Forwarded-For is the client). Run uvicorn with --no-proxy-headers, so that the connection's
own address is what it falls back to, not uvicorn's reading of the header (docs/operations.md).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from django.db import connection
from django.utils import timezone

from accounts import credentials
from benchmarks.network import host_bodies, hosts
from benchmarks.network import host_protocol as protocol
from benchmarks.network.heartbeat_batches import BatchFailed, Busy, DatabaseUnreachable, SteadyWriter
from benchmarks.network.host_protocol import (
    HEARTBEAT,
    HEARTBEATS,
    JSON_HEADERS,
    OUTAGE,
    Answer,
    answer_safely,
)
from common import client_address

log = logging.getLogger("django.request")

# Threads for the full path (a first heartbeat, a changed model list, a bad token, a call
# within 3 s): each holds a database connection while it works, so keep it small.
FULL_PATH_THREADS = 4
# Calls on or queued for those threads, at most (a flood of bad tokens); past it, BUSY.
FULL_PATH_WAITING_MAX = 400
BUSY: Answer = (503, {"detail": "Too many heartbeats at once; try again shortly.", "code": "busy"},
                {"Retry-After": "5"})
_ENCODED_HEADERS = [(name.lower().encode(), value.encode()) for name, value in JSON_HEADERS]


class HeartbeatApp:
    """The ASGI application (tokvera_site/heartbeats_asgi.py builds it)."""

    def __init__(self, writer: SteadyWriter) -> None:
        self.writer = writer
        self._full_path = ThreadPoolExecutor(FULL_PATH_THREADS, thread_name_prefix="heartbeat")
        self._full_path_waiting = 0

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        if scope["path"] != HEARTBEAT:
            await _send(send, 404, {"detail": "Not found. This server answers host heartbeats "
                                    f"only (POST {HEARTBEAT})."}, {})
            return
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
        status, payload, headers = await self.answer(authorization, body, address)
        HEARTBEATS.labels(status=str(status)).inc()
        await _send(send, status, payload, headers)

    async def answer(self, authorization: str, body: bytes | None, address: str) -> Answer:
        """What the Django view would answer `body` (None: longer than the limit, or unread
        because the token has no token's form) from `address`."""
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
                call = hosts.SteadyCall(token, fields["models"], fields["hardware"], fields["slots"],
                                        timezone.now(), not_within_s)
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
        if self._full_path_waiting >= FULL_PATH_WAITING_MAX:
            return BUSY

        def full_path() -> Answer | None:
            return protocol.answer_heartbeat(authorization, lambda limit: body, address,
                                              steady_tried=steady_tried)

        # Counted until this call's answer; a caller cancelled meanwhile (only at uvicorn's
        # forced shutdown) stops counting while its thread still works, which is harmless then.
        self._full_path_waiting += 1
        try:
            answered = await asyncio.get_running_loop().run_in_executor(
                self._full_path, answer_safely, full_path)
        finally:
            self._full_path_waiting -= 1
        assert answered is not None  # noqa: S101 - answer_heartbeat always answers
        return answered

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
        """Closes the batches' connection and each full-path thread's Django connection."""
        await self.writer.close()
        # One task per thread, each held at the barrier until all are, so every thread closes
        # its own; a thread still busy past the timeout is left to exit with the process.
        barrier = threading.Barrier(FULL_PATH_THREADS, timeout=10)
        loop = asyncio.get_running_loop()
        await asyncio.gather(*(loop.run_in_executor(self._full_path, _close_connection, barrier)
                               for _ in range(FULL_PATH_THREADS)), return_exceptions=True)
        self._full_path.shutdown(wait=False)


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


async def _send(send: Callable, status: int, payload: dict | list | None, headers: dict[str, str]) -> None:
    """As the WSGI fast path answers a heartbeat: JsonResponse's bytes and Django's headers."""
    body = json.dumps(payload).encode()
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
        *_ENCODED_HEADERS, *((name.lower().encode(), value.encode()) for name, value in headers.items())]})
    await send({"type": "http.response.body", "body": body})
