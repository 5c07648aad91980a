"""The scanner's HTTP transport: lean, HTTP/1.1 only, with a hook to refuse connections.

Why not ``httpx.AsyncHTTPTransport``: its connection pool re-scans every connection for every
queued request (quadratic at a few hundred concurrent streams, most of the scanner's CPU in a
profile), and the anyio socket layer adds a timer and several wrappers to every read. At the
concurrency a scan runs, that overhead would show up as latency and be blamed on the server.

This module keeps httpcore's HTTP/1.1 state machine (``httpcore.AsyncHTTPConnection``) and replaces
what sits around it:

* ``GuardedBackend`` -- an httpcore network backend on plain asyncio protocols. It resolves the
  host itself, calls ``connect_guard(host, port, ip)`` for every resolved address (any refusal
  refuses the connection) and then connects to the checked address, never the name again, so a DNS
  answer cannot change between the check and the connect. Every connection goes through it.
* ``ScanTransport`` -- an ``httpx.AsyncBaseTransport`` with a LIFO stack of idle connections per
  origin (O(1) per request). A request whose ``extensions`` carry ``FRESH_CONNECTION: True`` always
  gets a new connection (the scanner's one retry uses it).

Exceptions from httpcore are mapped to httpx's, as httpx's own transport does; a refusal by the
guard surfaces as ``ConnectionRefusedByGuard`` (an ``httpx.ConnectError``).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from typing import Any

import httpcore
import httpx

__all__ = [
    "FRESH_CONNECTION",
    "ConnectGuard",
    "ConnectionRefusedByGuard",
    "StaleConnectionError",
    "GuardRefusal",
    "GuardedBackend",
    "ScanTransport",
]

#: ``(host, port, resolved_ip) -> None``; raise (anything) to refuse the connection.
ConnectGuard = Callable[[str, int, str], None]

#: Request extension key: ``{FRESH_CONNECTION: True}`` never reuses an idle connection.
FRESH_CONNECTION = "tokvera.fresh_connection"

_READ_HIGH_WATER = 256 * 1024


class GuardRefusal(httpcore.ConnectError):
    """httpcore-level refusal; mapped to ``ConnectionRefusedByGuard``."""


class ConnectionRefusedByGuard(httpx.ConnectError):
    """The connect guard refused every address the host resolved to (or one of them)."""


class StaleConnectionError(httpx.RemoteProtocolError):
    """A request on a reused keep-alive connection failed before a single byte of its response
    arrived: the server had closed the connection. The one case a scan retries."""


# -- network backend ---------------------------------------------------------------------------


class _Protocol(asyncio.Protocol):
    __slots__ = ("transport", "buffer", "eof", "exc", "waiter", "drain_waiter", "paused",
                 "received_since_write")

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.eof = False
        self.exc: BaseException | None = None
        self.waiter: asyncio.Future | None = None
        self.drain_waiter: asyncio.Future | None = None
        self.paused = False
        # Bytes handed to the reader since the last write: 0 when a request failed before
        # a single byte of its response.
        self.received_since_write = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A TCP connection's transport is an asyncio.Transport; typeshed types the callback's
        # argument as the BaseTransport every protocol may get.
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        if len(self.buffer) > _READ_HIGH_WATER and self.transport is not None:
            self.transport.pause_reading()

    def eof_received(self) -> bool:
        self.eof = True
        self._wake()
        return False

    def connection_lost(self, exc: BaseException | None) -> None:
        self.eof = True
        if exc is not None:
            self.exc = exc
        self._wake()
        if self.drain_waiter is not None and not self.drain_waiter.done():
            self.drain_waiter.set_result(None)

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        if self.drain_waiter is not None and not self.drain_waiter.done():
            self.drain_waiter.set_result(None)

    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


class _Stream(httpcore.AsyncNetworkStream):
    def __init__(self, transport: asyncio.Transport, protocol: _Protocol) -> None:
        self._transport = transport
        self._protocol = protocol

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        proto = self._protocol
        if not proto.buffer:
            if proto.eof:
                if proto.exc is not None:
                    raise httpcore.ReadError(str(proto.exc) or type(proto.exc).__name__)
                return b""
            loop = asyncio.get_running_loop()
            proto.waiter = waiter = loop.create_future()
            try:
                if timeout is None:
                    await waiter
                else:
                    try:
                        await asyncio.wait_for(waiter, timeout)
                    except TimeoutError as exc:
                        raise httpcore.ReadTimeout("read timed out") from exc
            finally:
                proto.waiter = None
            if not proto.buffer:
                if proto.exc is not None:
                    raise httpcore.ReadError(str(proto.exc) or type(proto.exc).__name__)
                return b""
        buf = proto.buffer
        if len(buf) <= max_bytes:
            data = bytes(buf)
            buf.clear()
        else:
            data = bytes(buf[:max_bytes])
            del buf[:max_bytes]
        proto.received_since_write += len(data)
        if len(buf) < _READ_HIGH_WATER and not self._transport.is_closing():
            with contextlib.suppress(Exception):
                self._transport.resume_reading()
        return data

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        proto = self._protocol
        proto.received_since_write = 0
        if proto.eof and proto.exc is not None or self._transport.is_closing():
            raise httpcore.WriteError("connection closed")
        try:
            self._transport.write(buffer)
        except (OSError, RuntimeError) as exc:
            raise httpcore.WriteError(str(exc)) from exc
        if proto.paused:
            proto.drain_waiter = waiter = asyncio.get_running_loop().create_future()
            try:
                await asyncio.wait_for(waiter, timeout)
            except TimeoutError as exc:
                raise httpcore.WriteTimeout("write timed out") from exc
            finally:
                proto.drain_waiter = None

    async def aclose(self) -> None:
        self._transport.close()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        try:
            new_transport = await asyncio.wait_for(
                loop.start_tls(self._transport, self._protocol, ssl_context,
                               server_hostname=server_hostname),
                timeout,
            )
        except TimeoutError as exc:
            self._transport.close()
            raise httpcore.ConnectTimeout("TLS handshake timed out") from exc
        except (OSError, ssl.SSLError) as exc:
            self._transport.close()
            raise httpcore.ConnectError(str(exc)) from exc
        # typeshed allows start_tls to return None; on a TCP transport it returns the TLS one.
        return _Stream(new_transport, self._protocol)  # type: ignore[arg-type]

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":
            proto = self._protocol
            return bool(proto.buffer) or proto.eof
        if info == "ssl_object":
            return self._transport.get_extra_info("ssl_object")
        if info == "client_addr":
            return self._transport.get_extra_info("sockname")
        if info == "server_addr":
            return self._transport.get_extra_info("peername")
        if info == "socket":
            return self._transport.get_extra_info("socket")
        return None


class GuardedBackend(httpcore.AsyncNetworkBackend):
    """asyncio network backend that checks each resolved address with ``connect_guard``."""

    def __init__(self, connect_guard: ConnectGuard | None = None) -> None:
        self._guard = connect_guard

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                               proto=socket.IPPROTO_TCP)
                if not infos:
                    raise httpcore.ConnectError(f"{host} did not resolve")
                if self._guard is not None:
                    for info in infos:
                        ip = str(info[4][0])  # an IPv4 or IPv6 address (SOCK_STREAM)
                        try:
                            self._guard(host, port, ip)
                        except Exception as exc:  # the guard's refusal, whatever its type
                            raise GuardRefusal(
                                f"connection to {host} ({ip}) port {port} refused: {exc}"
                            ) from exc
                last_exc: OSError | None = None
                for family, type_, proto, _, sockaddr in infos:
                    try:
                        transport, protocol = await _connect(
                            loop, family, type_, proto, sockaddr, local_address, socket_options
                        )
                    except OSError as exc:
                        last_exc = exc
                        continue
                    return _Stream(transport, protocol)
                raise httpcore.ConnectError(str(last_exc) if last_exc else "connect failed")
        except TimeoutError as exc:
            raise httpcore.ConnectTimeout("connect timed out") from exc
        except OSError as exc:
            raise httpcore.ConnectError(str(exc)) from exc

    async def connect_unix_socket(self, path: str, timeout: float | None = None,
                                  socket_options: Iterable[Any] | None = None
                                  ) -> httpcore.AsyncNetworkStream:  # pragma: no cover
        raise httpcore.ConnectError("unix sockets are not supported by the scanner")

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


async def _connect(
    loop: asyncio.AbstractEventLoop, family: int, type_: int, proto: int, sockaddr: Any,
    local_address: str | None, socket_options: Iterable[Any] | None,
) -> tuple[asyncio.Transport, _Protocol]:
    sock = socket.socket(family, type_, proto)
    try:
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for option in socket_options or ():
            sock.setsockopt(*option)
        if local_address:
            sock.bind((local_address, 0))
        await loop.sock_connect(sock, sockaddr)
        transport, protocol = await loop.create_connection(_Protocol, sock=sock)
    except BaseException:
        sock.close()
        raise
    return transport, protocol


class _Recorder(httpcore.AsyncNetworkBackend):
    """One connection's backend: remembers the stream it opened (to read its byte count)."""

    __slots__ = ("backend", "stream")

    def __init__(self, backend: GuardedBackend) -> None:
        self.backend = backend
        self.stream: httpcore.AsyncNetworkStream | None = None

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                          local_address: str | None = None,
                          socket_options: Iterable[Any] | None = None
                          ) -> httpcore.AsyncNetworkStream:
        self.stream = await self.backend.connect_tcp(host, port, timeout, local_address,
                                                     socket_options)
        return self.stream

    async def connect_unix_socket(self, path: str, timeout: float | None = None,
                                  socket_options: Iterable[Any] | None = None
                                  ) -> httpcore.AsyncNetworkStream:  # pragma: no cover
        return await self.backend.connect_unix_socket(path, timeout, socket_options)

    async def sleep(self, seconds: float) -> None:  # pragma: no cover
        await asyncio.sleep(seconds)

    def bytes_since_write(self) -> int | None:
        stream = self.stream
        if isinstance(stream, _Stream):
            return stream._protocol.received_since_write
        return None


_STALE_SIGNS = (httpcore.RemoteProtocolError, httpcore.ReadError, httpcore.WriteError)


# -- httpx transport ---------------------------------------------------------------------------

_EXC_MAP: list[tuple[type[Exception], type[httpx.HTTPError]]] = [
    (GuardRefusal, ConnectionRefusedByGuard),
    (httpcore.ConnectTimeout, httpx.ConnectTimeout),
    (httpcore.ReadTimeout, httpx.ReadTimeout),
    (httpcore.WriteTimeout, httpx.WriteTimeout),
    (httpcore.PoolTimeout, httpx.PoolTimeout),
    (httpcore.TimeoutException, httpx.TimeoutException),
    (httpcore.ConnectError, httpx.ConnectError),
    (httpcore.ReadError, httpx.ReadError),
    (httpcore.WriteError, httpx.WriteError),
    (httpcore.NetworkError, httpx.NetworkError),
    (httpcore.ProxyError, httpx.ProxyError),
    (httpcore.UnsupportedProtocol, httpx.UnsupportedProtocol),
    (httpcore.RemoteProtocolError, httpx.RemoteProtocolError),
    (httpcore.LocalProtocolError, httpx.LocalProtocolError),
    (httpcore.ProtocolError, httpx.ProtocolError),
]


@contextlib.contextmanager
def _mapped() -> Iterator[None]:
    try:
        yield
    except Exception as exc:
        for source, target in _EXC_MAP:  # most specific first
            if isinstance(exc, source):
                raise target(str(exc)) from exc
        raise


class _ResponseStream(httpx.AsyncByteStream):
    __slots__ = ("_stream", "_on_close", "_closed")

    def __init__(self, stream: Any, on_close: Callable[[], None]) -> None:
        self._stream = stream
        self._on_close = on_close
        self._closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with _mapped():
            async for part in self._stream:
                yield part

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            with _mapped():
                await self._stream.aclose()
        finally:
            self._on_close()


class ScanTransport(httpx.AsyncBaseTransport):
    """HTTP/1.1 transport with an O(1) idle-connection stack per origin.

    The number of open connections is bounded by the caller's concurrency (one per in-flight
    request); at most ``max_idle`` idle connections are kept per origin.
    """

    def __init__(
        self,
        *,
        connect_guard: ConnectGuard | None = None,
        verify: bool | ssl.SSLContext = True,
        keepalive_expiry: float = 5.0,
        max_idle: int = 1024,
    ) -> None:
        # Built on first use: loading the CA bundle costs tens of ms of CPU that a plain-HTTP
        # scan should not spend (it would show up in the scanner's own CPU figures).
        self._verify = verify
        self._ssl_context: ssl.SSLContext | None = (
            verify if isinstance(verify, ssl.SSLContext) else None)
        self._backend = GuardedBackend(connect_guard)
        self._keepalive_expiry = keepalive_expiry
        self._max_idle = max_idle
        self._idle: dict[tuple[bytes, bytes, int], list[httpcore.AsyncHTTPConnection]] = {}
        self._all: dict[httpcore.AsyncHTTPConnection, _Recorder] = {}
        self._closed = False

    def _new_connection(self, origin: httpcore.Origin) -> httpcore.AsyncHTTPConnection:
        recorder = _Recorder(self._backend)
        if origin.scheme == b"https" and self._ssl_context is None:
            self._ssl_context = httpx.create_ssl_context(verify=self._verify)
        connection = httpcore.AsyncHTTPConnection(
            origin=origin,
            ssl_context=self._ssl_context,
            keepalive_expiry=self._keepalive_expiry,
            http1=True,
            http2=False,
            network_backend=recorder,
        )
        self._all[connection] = recorder
        return connection

    def _checkout(self, origin: httpcore.Origin, fresh: bool
                  ) -> tuple[httpcore.AsyncHTTPConnection, bool]:
        """(connection, reused)"""
        stack = self._idle.get((origin.scheme, origin.host, origin.port))
        while stack and not fresh:
            connection = stack.pop()
            if connection.is_idle() and not connection.has_expired():
                return connection, True
            self._discard(connection)
        return self._new_connection(origin), False

    def _checkin(self, origin: httpcore.Origin, connection: httpcore.AsyncHTTPConnection) -> None:
        if self._closed or not connection.is_idle() or connection.is_closed():
            self._discard(connection)
            return
        stack = self._idle.setdefault((origin.scheme, origin.host, origin.port), [])
        if len(stack) >= self._max_idle:
            self._discard(connection)
            return
        stack.append(connection)

    def _discard(self, connection: httpcore.AsyncHTTPConnection) -> None:
        self._all.pop(connection, None)
        if not connection.is_closed():
            # Closing an asyncio transport is synchronous underneath; no await needed for
            # correctness, but httpcore's API is async, so schedule it.
            with contextlib.suppress(RuntimeError):
                asyncio.get_running_loop().create_task(_quiet_close(connection))

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self._closed:
            raise RuntimeError("transport is closed")
        url = request.url
        scheme = url.raw_scheme
        if scheme not in (b"http", b"https"):
            raise httpx.UnsupportedProtocol(f"unsupported scheme {url.scheme!r}")
        port = url.port or (443 if scheme == b"https" else 80)
        origin = httpcore.Origin(scheme, url.raw_host, port)
        extensions = request.extensions
        connection, reused = self._checkout(origin, bool(extensions.get(FRESH_CONNECTION)))
        core_request = httpcore.Request(
            method=request.method,
            url=httpcore.URL(scheme=scheme, host=url.raw_host, port=url.port,
                             target=url.raw_path),
            headers=request.headers.raw,
            content=request.stream,
            extensions=extensions,
        )
        try:
            try:
                response = await connection.handle_async_request(core_request)
            except _STALE_SIGNS as exc:
                recorder = self._all.get(connection)
                if reused and recorder is not None and recorder.bytes_since_write() == 0:
                    raise StaleConnectionError(str(exc)) from exc
                raise
        except StaleConnectionError:
            self._discard(connection)
            raise
        except BaseException as exc:
            self._discard(connection)
            with _mapped():
                raise exc
        return httpx.Response(
            status_code=response.status,
            headers=response.headers,
            stream=_ResponseStream(response.stream,
                                   lambda: self._checkin(origin, connection)),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        self._closed = True
        connections, self._all = list(self._all), {}
        self._idle.clear()
        for connection in connections:
            await _quiet_close(connection)


async def _quiet_close(connection: httpcore.AsyncHTTPConnection) -> None:
    with contextlib.suppress(Exception):
        await connection.aclose()
