"""The site's outbound guard (SSRF): every connection our servers open to a user-given URL.

The grader calls `guard(host, port, ip)` for each *resolved* address of every connection,
redirects and the /metrics probe included, so a name that resolves to an internal address is
refused however it is spelled. Loopback, private, link-local, CGNAT, multicast and reserved
ranges are refused unless OUTBOUND_ALLOW names them ("loopback", "private").

The `tokvera scan` command line does not use this guard: it scans what its user points it
at. The guard protects the site, whose servers must not become a proxy into their network.

What the site tells a person about a failed outbound connection is one of a few coarse classes
(NOT_REACHABLE, TLS_ERROR, "HTTP <status>"): a refused address, a name that does not resolve,
a closed, filtered or silent port all read "not reachable from this site", so no answer names
where a name resolves or tells those ports apart. The detail goes to the server log only.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
import ssl
from urllib.parse import urlsplit

from django.conf import settings

log = logging.getLogger(__name__)

CGNAT = ipaddress.ip_network("100.64.0.0/10")
# The 6to4 relay anycast prefix (RFC 3068, deprecated by RFC 7526): Python counts it global,
# but a relay forwards into whatever IPv6 network it fronts, so it is no public target.
SIXTO4_RELAY = ipaddress.ip_network("192.88.99.0/24")
SITE_LOCAL_V6 = ipaddress.ip_network("fec0::/10")  # deprecated, still routed inside some LANs


NOT_REACHABLE = "not reachable from this site"
TLS_ERROR = "TLS error"


class OutboundRefused(Exception):
    """A connection to an address the site may not reach. Its message is NOT_REACHABLE, never
    the address (a name's internal address is not told); `detail` is for the server log."""

    def __init__(self, detail: str = ""):
        super().__init__(NOT_REACHABLE)
        self.detail = detail or NOT_REACHABLE


def classify(ip: str) -> str | None:
    """The name of the forbidden range `ip` falls in, or None when it is public."""
    address = ipaddress.ip_address(ip)
    if isinstance(address, ipaddress.IPv6Address):
        if address in SITE_LOCAL_V6:
            return "private"
        # An IPv4 address wrapped in IPv6 (mapped, 6to4, Teredo) is judged as itself.
        embedded = address.ipv4_mapped or address.sixtofour or (
            address.teredo[1] if address.teredo else None)
        if embedded is not None:
            address = embedded
    if address.is_loopback:
        return "loopback"
    if address in CGNAT:
        return "cgnat"
    if address.is_link_local:
        return "link-local"
    if address.is_multicast:
        return "multicast"
    if address.is_reserved or address.is_unspecified or address in SIXTO4_RELAY:
        return "reserved"
    if address.is_private or not address.is_global:
        return "private"
    return None


def check_address(ip: str, allow: frozenset[str] | None = None) -> None:
    allow = frozenset(settings.OUTBOUND_ALLOW) if allow is None else allow
    kind = classify(ip)
    if kind is not None and kind not in allow:
        raise OutboundRefused(f"refused to connect to {ip}: a {kind} address")


def guard(host: str, port: int, ip: str) -> None:
    """The connect guard handed to the grader (ConnectGuard signature)."""
    check_address(ip)


def check_url(url: str) -> None:
    """Resolve the URL's host now and refuse it if any address is forbidden (a clear error
    before any load is sent; the guard still checks every connection during the scan)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror:
        return  # unresolvable: the scan itself reports the target unreachable
    for info in infos:
        check_address(str(info[4][0]))  # an IPv4 or IPv6 address (SOCK_STREAM)


def refusal_in(measurement) -> str | None:
    """NOT_REACHABLE if any request of the scan was refused by the guard (the record's own
    error names the address: it goes to the server log only), else None."""
    for level in measurement.levels:
        for record in level.requests:
            if record.error and NOT_REACHABLE in record.error:
                log.info("outbound connection refused: %s", record.error)
                return NOT_REACHABLE
    return None


def failure_class(exc: BaseException) -> str:
    """What a person is told of an outbound request that got no HTTP answer: TLS_ERROR when
    the peer spoke and the TLS handshake failed (a certificate, plain HTTP on an https URL),
    else NOT_REACHABLE (a refused address, no DNS answer, a closed, filtered or silent port,
    a reset, a timeout: told apart, they would map ports and names the site can reach)."""
    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    while todo:
        current = todo.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, ssl.SSLError) and not isinstance(
            current, ssl.SSLEOFError | ssl.SSLZeroReturnError  # closed without a word: silence
        ):
            return TLS_ERROR
        linked = [current.__cause__, current.__context__, getattr(current, "reason", None), *current.args]
        todo.extend(e for e in linked if isinstance(e, BaseException))
    return NOT_REACHABLE
