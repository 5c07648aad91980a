"""Alert webhooks: signed with HMAC-SHA256 and sent through the site's outbound guard."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from accounts import encryption
from scans import alerts
from scans.outbound import OutboundRefused
from tests.helpers.factories import make_endpoint, make_scan

pytestmark = pytest.mark.django_db


class _Receiver:
    def __init__(self):
        received = self.received = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's naming
                body = self.rfile.read(int(self.headers["Content-Length"]))
                received.append((dict(self.headers), body))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver():
    r = _Receiver()
    yield r
    r.close()


def test_a_webhook_carries_a_signature_the_receiver_can_check(world, settings, receiver):
    settings.OUTBOUND_ALLOW = ["loopback"]
    endpoint = make_endpoint(world.team, webhook_url=receiver.url,
                             webhook_secret_encrypted=encryption.encrypt("s3cret"))
    scan = make_scan(endpoint)
    message = alerts.payload(endpoint, scan, "below_floor", "grade F is below the floor B")
    assert alerts.deliver_webhook(endpoint, message) == 204
    [(headers, body)] = receiver.received
    expected = "sha256=" + hmac.new(b"s3cret", body, hashlib.sha256).hexdigest()
    assert headers["X-Tokvera-Signature"] == expected
    sent = json.loads(body)
    assert sent["event"] == "below_floor" and sent["scan"]["id"] == str(scan.public_id)
    assert "s3cret" not in body.decode()


def test_a_webhook_to_an_internal_address_is_refused_and_not_sent(world, settings, receiver):
    settings.OUTBOUND_ALLOW = []
    endpoint = make_endpoint(world.team, webhook_url=receiver.url)
    scan = make_scan(endpoint)
    with pytest.raises(OutboundRefused):
        alerts.deliver_webhook(endpoint, alerts.payload(endpoint, scan, "x", "y"))
    assert receiver.received == []
