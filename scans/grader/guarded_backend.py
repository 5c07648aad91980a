"""The grader's network backend: connections on plain asyncio protocols, every address checked
by the connect guard (the HTTP on top is transport.py's).

``GuardedBackend`` is an httpcore network backend. It resolves the host itself, calls
``connect_guard(host, port, ip)`` for every resolved address (any refusal refuses the
connection) and then connects to the checked address, never the name again, so a DNS answer
cannot change between the check and the connect. Every connection goes through it. Why not
anyio's sockets: they add a timer and several wrappers to every read, overhead that a scan at
a few hundred streams would measure as the server's latency.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections.abc import Callable, Iterable
from typing import Any

import httpcore

__all__ = ["ConnectGuard", "GuardRefusal", "GuardedBackend", "RecordingBackend"]

#: ``(host, port, resolved_ip) -> None``; raise (anything) to refuse the connection.
ConnectGuard = Callable[[str, int, str], None]


_READ_HIGH_WATER = 256 * 1024


class GuardRefusal(httpcore.ConnectError):
    """httpcore-level refusal; mapped to ``ConnectionRefusedByGuard``."""


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


class RecordingBackend(httpcore.AsyncNetworkBackend):
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
