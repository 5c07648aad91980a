"""Real loopback servers for the engine tests: the reference target and raw asyncio servers
that misbehave on purpose. Each runs its own event loop in a background thread, so the scanner
under test runs exactly as the CLI runs it (``run_scan`` on the main thread)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import ssl
import struct
import threading
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from http.client import HTTPMessage
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import jsonschema

from scans.grader import ScanPlan, run_scan
from scans.grader.measurement import Measurement
from tests.helpers.paths import ROOT

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
SCHEMA = json.loads((ROOT / "docs" / "report.schema.json").read_text(encoding="utf-8"))


def validate_report(report: dict) -> None:
    jsonschema.validate(report, SCHEMA)


@contextlib.contextmanager
def raw_server(handler: Handler, host: str = "127.0.0.1",
               ssl_context: ssl.SSLContext | None = None) -> Iterator[int]:
    """Serve `handler(reader, writer)` per connection on a free loopback port (TLS when given
    a context); yields the port."""
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    state: dict = {}

    async def _wrapped(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await handler(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError,
                ssl.SSLError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    def _run() -> None:
        asyncio.set_event_loop(loop)
        server = loop.run_until_complete(asyncio.start_server(_wrapped, host, 0,
                                                              ssl=ssl_context))
        state["server"] = server
        state["port"] = server.sockets[0].getsockname()[1]
        ready.set()
        loop.run_forever()
        server.close()
        tasks = asyncio.all_tasks(loop)
        for task in tasks:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        loop.close()

    thread = threading.Thread(target=_run, daemon=True)
    thread.start()
    ready.wait(10)
    try:
        yield state["port"]
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)


async def read_request(reader: asyncio.StreamReader) -> tuple[bytes, dict]:
    """Read one HTTP/1.1 request; returns (head, JSON body or {})."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    body = await reader.readexactly(length) if length else b""
    try:
        return head, json.loads(body) if body else {}
    except ValueError:
        return head, {}


SSE_HEAD = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\nconnection: keep-alive\r\n\r\n")


def http_chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data) if data else b""


END_CHUNKS = b"0\r\n\r\n"


def content_event(text: str, *, role: bool = False, finish: str | None = None,
                  sep: bytes = b"\n", prefix: bytes = b"data: ") -> bytes:
    delta: dict = {"content": text}
    if role:
        delta = {"role": "assistant", "content": text}
    obj = {"id": "x", "object": "chat.completion.chunk",
           "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return prefix + json.dumps(obj).encode() + sep + sep


def finish_event(reason: str = "stop", sep: bytes = b"\n") -> bytes:
    obj = {"id": "x", "choices": [{"index": 0, "delta": {}, "finish_reason": reason}]}
    return b"data: " + json.dumps(obj).encode() + sep + sep


def usage_event(prompt: int, completion: int, sep: bytes = b"\n") -> bytes:
    obj = {"id": "x", "choices": [],
           "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                     "total_tokens": prompt + completion}}
    return b"data: " + json.dumps(obj).encode() + sep + sep


def done_event(sep: bytes = b"\n") -> bytes:
    return b"data: [DONE]" + sep + sep


def good_stream(n: int = 5, usage: bool = True) -> bytes:
    body = b"".join(content_event(f" w{i}", role=(i == 0)) for i in range(n))
    body += finish_event()
    if usage:
        body += usage_event(10, n)
    return body + done_event()


def json_response(status: int, obj: object, reason: bytes = b"Status") -> bytes:
    body = json.dumps(obj).encode()
    return (b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
            % (status, reason, len(body))) + body


def counting_server(count: list[int]) -> Handler:
    """A keep-alive server that answers every request 404 and appends 1 to `count` for each:
    a scan refused before any request leaves `count` empty."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                await read_request(reader)
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            count.append(1)
            writer.write(json_response(404, {"error": "not found"}))
            await writer.drain()

    return handler


def stream_server(make_body: Callable[[int], bytes]) -> Handler:
    """A keep-alive server answering every chat request with one chunked SSE body
    (`make_body(request_number)`), and 404 to anything else."""
    counter = {"n": 0}

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                head, _ = await read_request(reader)
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            if b"/chat/completions" not in head.split(b"\r\n")[0]:
                writer.write(json_response(404, {"error": "not found"}))
                await writer.drain()
                continue
            number = counter["n"]
            counter["n"] += 1
            writer.write(SSE_HEAD + http_chunk(make_body(number)) + END_CHUNKS)
            await writer.drain()

    return handler


def reset_connection(writer: asyncio.StreamWriter) -> None:
    """Close with an RST (SO_LINGER 0) instead of a FIN."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


def scan(port: int, *, levels: tuple[int, ...] = (1,), requests: int = 3,
         timeout_s: float = 10.0, path: str = "/v1", host: str = "127.0.0.1",
         **kwargs) -> Measurement:
    plan = ScanPlan(base_url=f"http://{host}:{port}{path}", model="test-model",
                    levels=levels, requests=requests, timeout_s=timeout_s, max_tokens=16,
                    **kwargs)
    return run_scan(plan)


def plan_for(port: int, **kwargs) -> ScanPlan:
    defaults = dict(levels=(1,), requests=3, timeout_s=10.0, max_tokens=16)
    defaults.update(kwargs)
    return ScanPlan(base_url=f"http://127.0.0.1:{port}/v1", model="test-model", **defaults)


def paced_stream_server(events: list[bytes], delay: float = 0.005) -> Handler:
    """Like `stream_server`, but every event is its own write, `delay` seconds apart."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                await read_request(reader)
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            writer.write(SSE_HEAD)
            for event in events:
                writer.write(http_chunk(event))
                await writer.drain()
                await asyncio.sleep(delay)
            writer.write(END_CHUNKS)
            await writer.drain()

    return handler


@dataclass
class Request:
    """One request as `serve` hands it to its answer."""

    method: str
    path: str  # with its query string
    headers: HTTPMessage  # read case-insensitively: headers.get("Host")
    body: bytes


# answer(request) -> (status, headers, body)
Answer = Callable[[Request], tuple[int, dict[str, str], bytes]]
NO_BODY_STATUSES = (204, 304)


@contextlib.contextmanager
def serve(answer: Answer, *, tls: ssl.SSLContext | None = None) -> Iterator[int]:
    """The one loopback HTTP/1.1 server of the tests: every request (GET, POST, PUT, PATCH,
    DELETE), on a thread of its own, gets `answer(request)`; over TLS when given a context.
    Yields the port; the server stops when the block ends. (Raw, misbehaving servers are
    `raw_server`.)"""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            status, headers, data = answer(Request(self.command, self.path, self.headers, body))
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            if status not in NO_BODY_STATUSES:
                self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if data:
                self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _answer  # noqa: N815 - http.server's naming

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_port
    finally:
        server.shutdown()
        server.server_close()


def json_answer(status: int, obj: object) -> tuple[int, dict[str, str], bytes]:
    """An answer for `serve`: `obj` as a JSON body."""
    return status, {"Content-Type": "application/json"}, json.dumps(obj).encode()


def healthz(request: Request) -> tuple[int, dict[str, str], bytes]:
    """An answer for `serve`: a stand-in site whose /healthz answers 200 (anything else 404)."""
    if request.method != "GET":
        return 501, {}, b""
    return (200 if request.path == "/healthz" else 404), {}, b""


@contextlib.contextmanager
def webhook_receiver() -> Iterator[tuple[str, list[tuple[dict, bytes]]]]:
    """A loopback HTTP server that answers every POST 204 and keeps (headers, body) of each;
    yields (its URL, that list). Alert webhooks are sent to it."""
    received: list[tuple[dict, bytes]] = []

    def keep(request: Request) -> tuple[int, dict[str, str], bytes]:
        if request.method != "POST":
            return 501, {}, b""
        received.append((dict(request.headers), request.body))
        return 204, {}, b""

    with serve(keep) as port:
        yield f"http://127.0.0.1:{port}/hook", received


class SilentReceiver:
    """A raw server's handler (`raw_server(receiver.handler)`) that takes every connection, reads
    what is sent and never answers: a stalling receiver. It counts the connections it took and
    those the other side gave up on (closed)."""

    def __init__(self):
        self.accepted = 0
        self.closed = 0

    async def handler(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        try:
            while await reader.read(65536):
                pass
        finally:
            self.closed += 1
