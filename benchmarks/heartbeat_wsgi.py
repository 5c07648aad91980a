"""The heartbeat's lean path: answered in front of Django's middleware (tokvera_site/wsgi.py).

Heartbeats are most of the network's traffic (every host, every 15 s) and the cheapest call:
one cache round trip and one UPDATE. Through Django's middleware stack (sessions, CSRF,
messages, axes, Prometheus, host validation) and its per-request database health check, the
stack cost more than the work. This WSGI wrapper answers `POST /v1/hosts/heartbeat` itself with
the same function the Django view calls (`benchmarks.heartbeat.answer_heartbeat`) and hands every
other request to Django unchanged.

What the middleware did that still matters is done here or in `answer_heartbeat`: a body size
limit (64 KiB, read only after the token's form and the rate limit passed), the security header
that applies to a JSON answer (nosniff), no caching, and counting the call (Prometheus).
The Host header is not checked against ALLOWED_HOSTS: a bearer-token call whose answer names no
URL gives a forged Host nothing to poison.

The database connection is kept between heartbeats (Django's CONN_MAX_AGE rules) without a
health-check query per call: a connection the server dropped fails the statement, which is
closed and retried once on a fresh connection (recording a heartbeat twice is harmless).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable
from http import HTTPStatus

from django.db import InterfaceError, OperationalError, connection
from prometheus_client import Counter

from benchmarks.heartbeat import answer_heartbeat
from tokvera_site import errors

PATH = "/v1/hosts/heartbeat"
HEARTBEATS = Counter("tokvera_host_heartbeats", "Host heartbeats answered, by HTTP status", ["status"])
log = logging.getLogger("django.request")

class HeartbeatFastPath:
    def __init__(self, django_app: Callable) -> None:
        self.django_app = django_app

    def __call__(self, environ: dict, start_response: Callable) -> Iterable[bytes]:
        if environ.get("PATH_INFO") != PATH or environ.get("REQUEST_METHOD") != "POST":
            return self.django_app(environ, start_response)
        try:
            status, payload, headers = self._answer(environ)
        except (InterfaceError, OperationalError):  # still unreachable after the retry
            log.warning("heartbeat: the database is unreachable")
            status, payload = 503, errors.OUTAGE_BODY
            headers = {"Retry-After": str(errors.OUTAGE_RETRY_AFTER_S)}
        except Exception:
            log.exception("heartbeat failed")
            status, payload, headers = 500, {"detail": "Internal server error.",
                                             "code": "server_error"}, {}
        finally:
            self._after_request()
        HEARTBEATS.labels(status=str(status)).inc()
        body = json.dumps(payload).encode()
        start_response(f"{status} {HTTPStatus(status).phrase}", [
            ("Content-Type", "application/json"),
            ("Content-Length", str(len(body))),
            ("X-Content-Type-Options", "nosniff"),
            ("Cache-Control", "no-store"),
            *headers.items(),
        ])
        return [body]

    def _answer(self, environ: dict) -> tuple[int, dict, dict[str, str]]:
        read = _BodyReader(environ)
        authorization = environ.get("HTTP_AUTHORIZATION", "")
        address = environ.get("REMOTE_ADDR", "")
        try:
            return answer_heartbeat(authorization, read, address)
        except (InterfaceError, OperationalError):
            # Dropped by the server since the last call: once more on a fresh connection (the
            # rate limit counts this call twice; harmless at 20 a minute).
            connection.close()
            return answer_heartbeat(authorization, read, address)

    @staticmethod
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
