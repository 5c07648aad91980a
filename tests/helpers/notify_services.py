"""Loopback stand-ins for the services notification channels post to.

One HTTPS server on 127.0.0.1 answers as each service's API does (the paths, status codes and
JSON bodies of their docs), and keeps every request. Apprise's plugins post to fixed hosts
(hooks.slack.com, discord.com, api.telegram.org, events.pagerduty.com, api.opsgenie.com):
the site's OUTBOUND_RESOLVE (curl --resolve) points those names at this server, and its
certificate, signed by a throwaway CA that REQUESTS_CA_BUNDLE names, is valid for them, so the
plugins run exactly as in production, TLS verification included. Teams (Workflows) and a
private ntfy take their host from the URL: they are given 127.0.0.1 and this server's port.
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import json
import re
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.helpers.servers import Request, serve

FIXED_HOSTS = (
    "hooks.slack.com",
    "discord.com",
    "api.telegram.org",
    "events.pagerduty.com",
    "api.opsgenie.com",
)

# (method, host or None for "the URL's own host", path pattern) → (status, body) the service
# answers; the service's name first.
ROUTES = [
    ("slack", "hooks.slack.com", r"/services/[^/]+/[^/]+/[^/]+", 200, "ok"),
    ("discord", "discord.com", r"/api/webhooks/\d+/[^/]+", 204, ""),
    (
        "telegram",
        "api.telegram.org",
        r"/bot[^/]+/sendMessage",
        200,
        {"ok": True, "result": {"message_id": 1, "chat": {"id": 1}, "date": 0}},
    ),
    (
        "pagerduty",
        "events.pagerduty.com",
        r"/v2/enqueue",
        202,
        {"status": "success", "message": "Event processed", "dedup_key": "tokvera-test"},
    ),
    (
        "opsgenie",
        "api.opsgenie.com",
        r"/v2/alerts",
        202,
        {"result": "Request will be processed", "took": 0.1, "requestId": "tokvera-test"},
    ),
    (  # Alert API: close an alert by its id, or by its alias with ?identifierType=alias
        "opsgenie",
        "api.opsgenie.com",
        r"/v2/alerts/[^/]+/close",
        202,
        {"result": "Request will be processed", "took": 0.1, "requestId": "tokvera-close"},
    ),
    ("teams", None, r"/workflows/[^/]+/triggers/manual/paths/invoke", 202, ""),
    ("ntfy", None, r"/", 200, {"id": "tokvera", "time": 0, "event": "message", "topic": "t"}),
]


@dataclass
class Received:
    service: str
    host: str
    path: str
    headers: dict
    body: dict | str


@dataclass
class Services:
    port: int
    ca_path: Path
    received: list[Received] = field(default_factory=list)
    failures_left: dict[str, int] = field(default_factory=dict)  # service → 503s still to give
    # (service, key) → the incident's state as the service keeps it: PagerDuty "triggered" or
    # "resolved" by dedup_key, Opsgenie "open" or "closed" by alias.
    incidents: dict[tuple[str, str], str] = field(default_factory=dict)

    def resolve(self) -> list[str]:
        """OUTBOUND_RESOLVE entries pointing the fixed hosts here."""
        return [f"{host}:443=127.0.0.1:{self.port}" for host in FIXED_HOSTS]

    def of(self, service: str) -> list[Received]:
        return [r for r in self.received if r.service == service]

    def fail_next(self, service: str, times: int) -> None:
        self.failures_left[service] = times


def _certificates(folder: Path) -> tuple[Path, Path, Path]:
    """A CA and a server certificate for the fixed hosts and 127.0.0.1."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "tokvera test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    names = [x509.DNSName(h) for h in FIXED_HOSTS] + [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, FIXED_HOSTS[0])]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    ca_path, cert_path, key_path = folder / "ca.pem", folder / "cert.pem", folder / "key.pem"
    ca_path.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return ca_path, cert_path, key_path


def _track(services: Services, name: str, url: str, body) -> None:
    """Open and resolve incidents as PagerDuty (Events API v2) and Opsgenie (Alert API) do."""
    if name == "pagerduty" and isinstance(body, dict) and body.get("dedup_key"):
        action = body.get("event_action")
        if action == "trigger":
            services.incidents[("pagerduty", body["dedup_key"])] = "triggered"
        elif action == "resolve" and ("pagerduty", body["dedup_key"]) in services.incidents:
            services.incidents[("pagerduty", body["dedup_key"])] = "resolved"
    elif name == "opsgenie":
        parts = urlsplit(url)
        closing = re.fullmatch(r"/v2/alerts/([^/]+)/close", parts.path)
        if closing is None and isinstance(body, dict) and body.get("alias"):
            services.incidents[("opsgenie", body["alias"])] = "open"
        elif closing and parse_qs(parts.query).get("identifierType") == ["alias"]:
            alias = unquote(closing.group(1))
            if ("opsgenie", alias) in services.incidents:
                services.incidents[("opsgenie", alias)] = "closed"


def _route(host: str, path: str) -> tuple[str, int, dict | str] | None:
    """The service a request is for (its name, status and answer), by host and path."""
    for name, route_host, pattern, status, answer in ROUTES:
        own_host = route_host is None and host == "127.0.0.1"
        if (own_host or route_host == host) and re.fullmatch(pattern, path):
            return name, status, answer
    return None


@contextlib.contextmanager
def running_services(folder: Path) -> Iterator[Services]:
    ca_path, cert_path, key_path = _certificates(folder)
    lock = threading.Lock()
    services: Services | None = None

    def reply(request: Request) -> tuple[int, dict[str, str], bytes]:
        if request.method != "POST":
            return 501, {}, b""
        host = (request.headers.get("Host") or "").split(":")[0].lower()
        path = request.path.split("?")[0]
        assert services is not None  # set before the port is known to anyone
        route = _route(host, path)
        if route is None:
            return _answer(404, {"error": "no such API here"})
        name, status, answer = route
        try:
            body: dict | str = json.loads(request.body) if request.body else ""
        except ValueError:
            body = request.body.decode("utf-8", "replace")
        with lock:
            services.received.append(Received(name, host, request.path, dict(request.headers), body))
            if services.failures_left.get(name, 0) > 0:
                services.failures_left[name] -= 1
                return _answer(503, {"error": "try again later"})
            _track(services, name, request.path, body)
        if isinstance(answer, dict) and isinstance(body, dict) and body.get("dedup_key"):
            answer = {**answer, "dedup_key": body["dedup_key"]}  # PagerDuty echoes the key
        return _answer(status, answer)

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_path, key_path)
    with serve(reply, tls=context) as port:
        services = Services(port=port, ca_path=ca_path)
        yield services


def _answer(status: int, answer: dict | str) -> tuple[int, dict[str, str], bytes]:
    data = (json.dumps(answer) if isinstance(answer, dict) else answer).encode()
    return status, {"Content-Type": "application/json" if isinstance(answer, dict) else "text/plain"}, data


def channel_urls(port: int) -> dict[str, str]:
    """An Apprise URL per kind, pointing at the stand-ins (made-up tokens)."""
    return {
        "slack": "https://hooks.slack.com/services/T0TOKVERA/B0TOKVERA/xoxtokverasecret1",
        "teams": f"workflows://127.0.0.1:{port}/tokverawf01/tokverasig01",
        "discord": "https://discord.com/api/webhooks/123456789012/tokvera-discord-token",
        "telegram": "tgram://123456789:AAtokveraTelegramBotToken_abcdefghij/987654321",
        "pagerduty": "pagerduty://tokverarouting01@tokveraapikey01",
        "opsgenie": "opsgenie://tokvera-opsgenie-key",
        "ntfy": f"ntfys://127.0.0.1:{port}/tokvera-alerts",
    }
