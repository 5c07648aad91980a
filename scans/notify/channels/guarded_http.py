"""Apprise's own connections, through the site's outbound guard.

Apprise's plugins open their connections with `requests` (urllib3), not with our transport, so
while a channel sends, every urllib3 connection made in that context is resolved here, each
address judged by `scans.outbound.check_address`, and refused unless its host is one the
channel's kind may reach (hooks.slack.com for Slack, the ntfy server the URL names, …). The
connection is then made to the address that was judged, so a name cannot resolve to a public
address for the check and an internal one for the connect. Redirects open new connections and
pass through here too.

While guarded, every request `requests` sends is also observed: the HTTP status it got, or
the coarse class (scans.outbound.failure_class) of the error it ended in, so a failed send is
told as "HTTP 503" or "not reachable from this site" whatever words Apprise chose; the
error's own text goes to the server log only.

The guard is held in a context variable: other threads and other code using urllib3 are not
affected, and Apprise's own executor (which copies the context) still is.

`post_json` is the same guard around our own requests, for what Apprise cannot send (closing
an Opsgenie alert by its alias): only the hosts given, each address judged, no redirects.

OUTBOUND_RESOLVE ("host:port=ip:port", as curl --resolve) names where a host connects instead;
the address given is judged like any other. Tests use it to stand loopback receivers in for
the services' fixed hosts.
"""

from __future__ import annotations

import contextlib
import contextvars
import socket
from collections.abc import Iterator
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import requests
import urllib3.util.connection as urllib3_connection
from django.conf import settings
from requests.adapters import HTTPAdapter

from scans.outbound import OutboundRefused, check_address, failure_class


@dataclass
class _Guarded:
    hosts: frozenset[str]  # the only hosts this send may reach (lower case)
    refused: list[str] = field(default_factory=list)  # why connections were refused (log only)
    # What each request got: "HTTP <status>", or the coarse class of its error.
    outcomes: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # the errors' own text (log only)


_current: contextvars.ContextVar[_Guarded | None] = contextvars.ContextVar(
    "tokvera_guarded_http", default=None
)
_original_create_connection = urllib3_connection.create_connection


def resolve_overrides() -> dict[tuple[str, int], tuple[str, int]]:
    """OUTBOUND_RESOLVE as {(host, port): (ip, port)}."""
    overrides = {}
    for entry in settings.OUTBOUND_RESOLVE:
        name, _, target = entry.partition("=")
        host, _, port = name.rpartition(":")
        ip, _, target_port = target.rpartition(":")
        overrides[(host.lower(), int(port))] = (ip.strip("[]"), int(target_port))
    return overrides


def addresses(host: str, port: int) -> list[tuple[str, int]]:
    """Where (host, port) connects: its OUTBOUND_RESOLVE entry, else every address it resolves
    to. Raises OSError (socket.gaierror) when the name does not resolve."""
    override = resolve_overrides().get((host.lower().rstrip("."), port))
    if override is not None:
        return [override]
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [(str(info[4][0]), port) for info in infos]


def check_host(host: str, port: int) -> None:
    """Refuse (OutboundRefused) a host any of whose addresses the guard forbids; a name that
    does not resolve passes (sending then fails, and is retried, as any unreachable host)."""
    try:
        found = addresses(host, port)
    except OSError:
        return
    for ip, _ in found:
        check_address(ip)


def _guarded_create_connection(
    address,
    timeout=socket._GLOBAL_DEFAULT_TIMEOUT,  # type: ignore[attr-defined]
    source_address=None,
    socket_options=None,
):
    guarded = _current.get()
    if guarded is None:
        return _original_create_connection(address, timeout, source_address, socket_options)
    host, port = address
    name = host.lower().rstrip(".").strip("[]")
    try:
        if name not in guarded.hosts:
            raise OutboundRefused(f"refused to connect to {host}: not a host this channel sends to")
        targets = addresses(name, port)
        for ip, _ in targets:
            check_address(ip)
    except OutboundRefused as exc:
        guarded.refused.append(exc.detail)
        # An OSError, so urllib3 and requests report it as a failed connection.
        raise ConnectionRefusedError(str(exc)) from None
    last: OSError | None = None
    for ip, target_port in targets:
        try:
            return _original_create_connection((ip, target_port), timeout, source_address, socket_options)
        except OSError as exc:
            last = exc
    raise last or OSError(f"no address for {host}")


urllib3_connection.create_connection = _guarded_create_connection
_original_send = HTTPAdapter.send


def _observed_send(self, request, *args, **kwargs):
    guarded = _current.get()
    if guarded is None:
        return _original_send(self, request, *args, **kwargs)
    try:
        response = _original_send(self, request, *args, **kwargs)
    except requests.RequestException as exc:
        guarded.outcomes.append(failure_class(exc))
        # The class and the host only: the error's own text holds the request's URL, and some
        # services put their token in it.
        host = urlsplit(request.url).hostname or "?"
        guarded.errors.append(f"{type(exc).__name__} talking to {host}")
        raise
    guarded.outcomes.append(f"HTTP {response.status_code}")
    return response


HTTPAdapter.send = _observed_send  # type: ignore[method-assign]


@contextlib.contextmanager
def guarded_connections(hosts: set[str]) -> Iterator[_Guarded]:
    """Within this block, urllib3 connects only to `hosts`, each address judged by the guard;
    the yielded object lists the refusals."""
    guarded = _Guarded(hosts=frozenset(h.lower() for h in hosts))
    token = _current.set(guarded)
    try:
        yield guarded
    finally:
        _current.reset(token)


def post_json(
    hosts: set[str],
    url: str,
    body: dict,
    headers: dict[str, str],
    params: dict[str, str] | None = None,
    timeout_s: float = 10,
) -> requests.Response:
    """POST `body` as JSON to `url`, connecting only to `hosts` (each address judged by the
    guard), following no redirect. Raises OutboundRefused when the guard refused a connection,
    requests.RequestException when the request failed otherwise."""
    with guarded_connections(hosts) as guarded:
        try:
            response = requests.post(
                url, json=body, headers=headers, params=params, timeout=timeout_s, allow_redirects=False
            )
        except requests.RequestException:
            if guarded.refused:
                raise OutboundRefused(guarded.refused[0]) from None
            raise
    return response
