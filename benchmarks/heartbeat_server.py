"""Host heartbeats served by an asyncio server, written to the database in batches.

    uvicorn tokvera_site.heartbeats_asgi:application --loop uvloop --http httptools

Every host heartbeats every 15 s: 10,000 hosts are 667 calls a second, all day, and the
network's most frequent call by far. Under gunicorn (benchmarks/host_wsgi.py) each one costs
about 0.7 ms of web CPU, mostly HTTP parsing and thread hand-offs in Python, and once a backlog
forms every waiting call holds a connection and a thread. Here uvicorn's HTTP (httptools, in C)
and one event loop serve them, and the steady heartbeats that arrive while one write runs go
to the database together in the next: one UPDATE for the whole batch
(benchmarks.hosts.steady_heartbeats_statement), which costs PostgreSQL a fraction of one
statement per call (DECISIONS.md, issue 25).

This server answers `POST /v1/hosts/heartbeat` and nothing else (404, or 405 for another
method on that path): route that path here at the proxy, everything else to the web process.
A steady heartbeat (a current token, an unchanged model list, not within window / limit of
the host's last: benchmarks/heartbeat.py) is answered from its batch's row. Every other call
takes the same full path as under gunicorn, `answer_heartbeat` on a thread of its own
(Django's ORM and cache are synchronous), which answers each case as the view does; its answer
is the same bytes either way (tests/benchmarks/test_heartbeat_server.py).

A dropped database connection is opened again and the batch written once more (a heartbeat
written twice is harmless); a database still unreachable answers every call of the batch
with the site's outage answer (503, Retry-After). The address used for the failed
authentications' limit is the connection's peer (uvicorn's client), as REMOTE_ADDR under
gunicorn; behind a proxy, run uvicorn with --proxy-headers and --forwarded-allow-ips set to it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import psycopg
from django.db import connection
from django.utils import timezone

from accounts import credentials
from benchmarks import heartbeat, hosts
from benchmarks.host_wsgi import HEARTBEAT, HEARTBEATS, JSON_HEADERS, Answer, answer_safely
from tokvera_site import errors

log = logging.getLogger("django.request")

# The most calls one UPDATE writes. A batch of this many takes PostgreSQL a few milliseconds;
# calls arriving meanwhile wait for the next one.
BATCH_MAX = 500
# Threads for the full path (unsteady calls: a first heartbeat, a changed model list, a bad
# token): each holds a database connection while it works, so keep it small.
FULL_PATH_THREADS = 4
_ENCODED_HEADERS = [(name.lower().encode(), value.encode()) for name, value in JSON_HEADERS]

Connect = Callable[[], Awaitable[psycopg.AsyncConnection]]


class DatabaseUnreachable(Exception):
    pass


def connect_as_django() -> Connect:
    """Connections to the database Django's default alias names, with its options."""
    params = {name: value for name, value in connection.get_connection_params().items()
              if name not in ("cursor_factory", "context", "pool")}
    return lambda: psycopg.AsyncConnection.connect(**params, autocommit=True)


@dataclass
class SteadyWriter:
    """Writes steady heartbeats in batches on one connection: each call waits for the batch it
    joined. One writer per process, so the process's own batches never wait on each other's
    row locks."""

    connect: Connect
    batch_max: int = BATCH_MAX
    _waiting: list[tuple[hosts.SteadyCall, asyncio.Future]] = field(default_factory=list)
    _wake: asyncio.Event | None = None
    _task: asyncio.Task | None = None
    _connection: psycopg.AsyncConnection | None = None

    async def record(self, call: hosts.SteadyCall) -> hosts.Heartbeat | None:
        """The call's answer, or None when it is not steady (nothing written for it)."""
        if self._task is None or self._task.done() or self._wake is None:  # first call, or it died
            self._wake = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._run(self._wake))
        answered: asyncio.Future = asyncio.get_running_loop().create_future()
        self._waiting.append((call, answered))
        self._wake.set()
        return await answered

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        if self._connection is not None:
            await self._connection.close()
            self._connection = None

    async def _run(self, wake: asyncio.Event) -> None:
        while True:
            await wake.wait()
            wake.clear()
            while self._waiting:
                batch = self._waiting[: self.batch_max]
                del self._waiting[: self.batch_max]
                try:
                    rows = await self._write([call for call, _ in batch])
                except Exception as exc:  # every call of the batch gets the error
                    for _, answered in batch:
                        if not answered.done():
                            answered.set_exception(exc)
                    continue
                found = {i: (suspended, trust) for i, suspended, trust in rows}
                for i, (call, answered) in enumerate(batch):
                    if not answered.done():  # not cancelled (the caller went away)
                        answered.set_result(hosts.steady_answer(call, *found[i]) if i in found else None)

    async def _write(self, calls: list[hosts.SteadyCall]) -> list[tuple[int, bool, str]]:
        sql, params = hosts.steady_heartbeats_statement(calls)
        for attempt in (1, 2):
            try:
                if self._connection is None or self._connection.closed:
                    self._connection = await self.connect()
                async with self._connection.cursor() as cursor:
                    await cursor.execute(sql, params)
                    return await cursor.fetchall()
            except psycopg.errors.DeadlockDetected:
                # Another process's batch locked the same hosts in another order: written
                # again, as one call would be after a lost answer.
                if attempt == 2:
                    raise
            except psycopg.OperationalError as exc:
                lost = self._connection is None or self._connection.closed or self._connection.broken
                if self._connection is not None and lost:
                    await self._connection.close()
                    self._connection = None
                if not lost:
                    raise  # e.g. a statement timeout: not run twice
                if attempt == 2:
                    raise DatabaseUnreachable from exc
        raise AssertionError("unreachable")


class HeartbeatApp:
    """The ASGI application (tokvera_site/heartbeats_asgi.py builds it)."""

    def __init__(self, writer: SteadyWriter) -> None:
        self.writer = writer
        self._full_path = ThreadPoolExecutor(FULL_PATH_THREADS, thread_name_prefix="heartbeat")

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
        if scope["method"] != "POST":
            await _send(send, 405, {"detail": f'Method "{scope["method"]}" not allowed.'},
                        {"Allow": "POST"})
            return
        authorization = _header(scope, b"authorization")
        body = await _read_body(scope, receive, heartbeat.HEARTBEAT_MAX_BYTES)
        address = (scope.get("client") or ("",))[0]
        status, payload, headers = await self.answer(authorization, body, address)
        HEARTBEATS.labels(status=str(status)).inc()
        await _send(send, status, payload, headers)

    async def answer(self, authorization: str, body: bytes | None, address: str) -> Answer:
        steady_tried = False
        token = credentials.split_bearer(authorization, hosts.TOKEN_KIND)
        not_within_s = heartbeat.steady_within_s()
        if token is not None and not_within_s is not None and body is not None:
            try:
                fields = heartbeat.parse_body(body)
            except ValueError:
                fields = None  # the full path answers it, after the token and the limits
            if fields is not None:
                call = hosts.SteadyCall(token, fields["models"], fields["hardware"], fields["slots"],
                                        timezone.now(), not_within_s)
                try:
                    recorded = await self.writer.record(call)
                except DatabaseUnreachable:
                    log.warning("heartbeat: the database is unreachable")
                    return 503, errors.OUTAGE_BODY, {"Retry-After": str(errors.OUTAGE_RETRY_AFTER_S)}
                except Exception:
                    log.exception("heartbeat failed")
                    return 500, {"detail": "Internal server error.", "code": "server_error"}, {}
                if recorded is not None:
                    return 200, heartbeat.answer_body(recorded), {}
                steady_tried = True

        def full_path() -> Answer | None:
            return heartbeat.answer_heartbeat(authorization, lambda limit: body, address,
                                              steady_tried=steady_tried)

        answered = await asyncio.get_running_loop().run_in_executor(
            self._full_path, answer_safely, full_path)
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
        # One task per thread, each held at the barrier until all are: every thread closes its own.
        barrier = threading.Barrier(FULL_PATH_THREADS)
        loop = asyncio.get_running_loop()
        await asyncio.gather(*(loop.run_in_executor(self._full_path, _close_connection, barrier)
                               for _ in range(FULL_PATH_THREADS)))
        self._full_path.shutdown(wait=True)


def _close_connection(barrier: threading.Barrier) -> None:
    barrier.wait()
    connection.close()


def _header(scope: dict, name: bytes) -> str:
    for key, value in scope["headers"]:
        if key == name:
            return value.decode("latin-1")
    return ""


async def _read_body(scope: dict, receive: Callable, limit: int) -> bytes | None:
    """The body, or None when it is longer than `limit` (then not read further)."""
    declared = _header(scope, b"content-length")
    if declared.isdigit() and int(declared) > limit:
        return None
    chunks, size, more = [], 0, True
    while more:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
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
