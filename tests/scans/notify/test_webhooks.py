"""Webhook channels: the alert's JSON signed with HMAC-SHA256, sent through the site's outbound
guard (scans/notify/channels/kinds.py)."""

from __future__ import annotations

import hashlib
import hmac
import json

import pytest

from scans.models import DeliveryStatus
from scans.notify import alerts
from scans.notify.channels import delivery
from tests.helpers.factories import make_channel, make_endpoint, make_scan
from tests.helpers.servers import webhook_receiver

pytestmark = pytest.mark.django_db


def _send(endpoint, scan, kind="below_floor", detail="grade F is below the floor B"):
    event = delivery.record(endpoint, scan, kind, alerts.payload(endpoint, scan, kind, detail))
    (row,) = [d for d in event.deliveries.all() if d.channel.kind == "webhook"]
    outcome = delivery.attempt(row.pk)
    row.refresh_from_db()
    return outcome, row


def test_a_webhook_carries_a_signature_the_receiver_can_check(world, settings):
    settings.OUTBOUND_ALLOW = ["loopback"]
    with webhook_receiver() as (url, received):
        endpoint = make_endpoint(world.team, webhook_url=url, webhook_secret="s3cret")
        scan = make_scan(endpoint)
        outcome, row = _send(endpoint, scan)
    assert outcome == "sent" and row.status == DeliveryStatus.SENT and row.attempts == 1
    [(headers, body)] = received
    expected = "sha256=" + hmac.new(b"s3cret", body, hashlib.sha256).hexdigest()
    assert headers["X-Tokvera-Signature"] == expected
    sent = json.loads(body)
    assert sent["event"] == "below_floor" and sent["scan"]["id"] == str(scan.public_id)
    assert "s3cret" not in body.decode()


def test_a_webhook_to_an_internal_address_is_refused_and_not_sent(world, settings):
    with webhook_receiver() as (url, received):
        settings.OUTBOUND_ALLOW = ["loopback"]  # allowed when the channel is saved ...
        channel = make_channel(world.team, "webhook", url=url)
        endpoint = make_endpoint(world.team, alert_email=False)
        endpoint.channels.set([channel])
        scan = make_scan(endpoint)
        settings.OUTBOUND_ALLOW = []  # ... and refused when it sends
        outcome, row = _send(endpoint, scan)
    assert received == []
    assert outcome == "failed" and row.status == DeliveryStatus.FAILED  # no retry changes it
    assert row.last_error == "not reachable from this site"
