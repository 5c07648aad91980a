"""The client's address, read the same way by everything that counts per address: the failed
token authentications (common/auth_failures.py, the Django views, the host fast path,
the heartbeat server) and the sign-in lockout (django-axes' AXES_CLIENT_IP_CALLABLE).

TRUSTED_PROXY_COUNT (docs/operations.md) is how many reverse proxies stand in front of the
site, each appending the address it was connected from to X-Forwarded-For. With 0 (the
default, no proxy) the client is the connection's own address and the header is ignored:
anyone may send one. With N, the client is the Nth address from the header's end, the one the
outermost trusted proxy wrote; whatever the caller put in front of it is its own to forge and
is never read. A request whose header has fewer hops than N, or whose hop is no IP address,
did not come through the proxies as configured: its connection's address counts instead.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping

from django.conf import settings
from django.http import HttpRequest


def from_forwarded(peer: str, forwarded_for: str) -> str:
    """The client of a connection from `peer` carrying `forwarded_for` (X-Forwarded-For, its
    repeated headers joined with commas in order), under TRUSTED_PROXY_COUNT."""
    count = settings.TRUSTED_PROXY_COUNT
    if count <= 0 or not forwarded_for:
        return peer
    hops = forwarded_for.split(",")
    if len(hops) < count:
        return peer
    return _ip(hops[-count]) or peer


def of_environ(environ: Mapping[str, str]) -> str:
    """The client of a WSGI request (its environ, or a Django request's META)."""
    return from_forwarded(environ.get("REMOTE_ADDR", ""), environ.get("HTTP_X_FORWARDED_FOR", ""))


def of_request(request: HttpRequest) -> str:
    """The client of a Django request (axes calls this with its request)."""
    return of_environ(request.META)


def of_scope(scope: dict) -> str:
    """The client of an ASGI request. Run uvicorn with --no-proxy-headers: its own reading of
    X-Forwarded-For would replace the connection's address this falls back to."""
    peer = (scope.get("client") or ("",))[0]
    forwarded = ",".join(value.decode("latin-1") for key, value in scope.get("headers", ())
                         if key == b"x-forwarded-for")
    return from_forwarded(peer, forwarded)


def _ip(hop: str) -> str | None:
    """A hop as an address (an IPv6 one in brackets, either with a port, as some proxies write
    them), or None when it is none."""
    hop = hop.strip()
    if hop.startswith("["):
        hop = hop[1:].partition("]")[0]
    elif hop.count(":") == 1:
        hop = hop.partition(":")[0]
    try:
        return str(ipaddress.ip_address(hop))
    except ValueError:
        return None
