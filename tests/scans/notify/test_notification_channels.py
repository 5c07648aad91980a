"""Team notification channels: each kind reaches a loopback stand-in that speaks its
service's API (tests/helpers/notify_services.py), "Send test" included; bad URLs are field
errors and nothing is saved; Apprise's connections go only where the kind sends, through the
outbound guard; a failing receiver leaves a retry row that a later run delivers; a recovery
says how long the endpoint was down."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qs, urlsplit

import pytest
import requests
import time_machine
from django.core import mail
from django.test import Client
from django.urls import reverse

from scans.models import (
    AlertEvent,
    Delivery,
    DeliveryStatus,
    Endpoint,
    NotificationChannel,
    Scan,
    ScanTrigger,
)
from scans.notify import alerts
from scans.notify.channels import delivery, guarded_http, service
from scans.outbound import OutboundRefused
from scans.running import worker as scan_worker
from tests.helpers.factories import make_channel, make_endpoint
from tests.helpers.notify_services import channel_urls, running_services
from tests.helpers.servers import webhook_receiver
from tests.scans.conftest import GRADE_A, report_for

pytestmark = pytest.mark.django_db

APPRISE_KINDS = ("slack", "teams", "discord", "telegram", "pagerduty", "opsgenie", "ntfy")


@pytest.fixture
def services(tmp_path, settings, monkeypatch, eager_tasks):
    """The stand-ins, reachable: loopback allowed, the fixed hosts resolved to them, their CA
    trusted by requests (as REQUESTS_CA_BUNDLE does for any deployment's own CA). A test message
    is sent by a worker: here, in the test's process (eager_tasks)."""
    with running_services(tmp_path) as stand_ins:
        settings.OUTBOUND_ALLOW = ["loopback"]
        settings.OUTBOUND_RESOLVE = stand_ins.resolve()
        monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(stand_ins.ca_path))
        yield stand_ins


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _add(client, world, kind, url="", name=None, **extra):
    data = {"kind": kind, "name": name or f"our {kind}", "url": url, "enabled": "on", **extra}
    return client.post(reverse("channel-create", args=[world.team.slug]), data)


def _channel(world, name) -> NotificationChannel:
    return NotificationChannel.dangerously_unscoped.get(team=world.team, name=name)


def _assert_speaks_the_api(kind: str, received, title: str, text: str) -> None:
    """What each service's API needs of the request (their docs), checked on what arrived."""
    (request,) = received
    body = request.body
    if kind == "slack":  # incoming webhook: POST /services/T/B/X, attachments or text
        assert request.path == "/services/T0TOKVERA/B0TOKVERA/xoxtokverasecret1"
        assert body["attachments"][0]["title"] == title and text in body["attachments"][0]["text"]
    elif kind == "teams":  # Workflows: an Adaptive Card message, signed in the query
        query = parse_qs(urlsplit(request.path).query)
        assert query["sig"] == ["tokverasig01"] and "api-version" in query
        assert body["type"] == "message"
        card = body["attachments"][0]
        assert card["contentType"] == "application/vnd.microsoft.card.adaptive"
        assert title in json.dumps(card["content"]) and text in json.dumps(card["content"])
    elif kind == "discord":  # webhook execute: content (or embeds)
        assert request.path.startswith("/api/webhooks/123456789012/tokvera-discord-token")
        assert title in body["content"] and text in body["content"]
    elif kind == "telegram":  # Bot API sendMessage
        assert request.path == "/bot123456789:AAtokveraTelegramBotToken_abcdefghij/sendMessage"
        assert body["chat_id"] == 987654321 and title in body["text"] and text in body["text"]
    elif kind == "pagerduty":  # Events API v2
        assert request.headers["Authorization"] == "Token token=tokveraapikey01"
        assert body["routing_key"] == "tokverarouting01" and body["event_action"] == "trigger"
        assert body["payload"]["severity"] in ("info", "warning", "error", "critical")
        assert title in body["payload"]["summary"] and body["payload"]["source"]
    elif kind == "opsgenie":  # Alert API: create alert
        assert request.headers["Authorization"] == "GenieKey tokvera-opsgenie-key"
        assert body["message"] == title and text in body["description"]
    elif kind == "ntfy":  # publish as JSON to the server's root
        assert body["topic"] == "tokvera-alerts" and body["title"] == title
        assert text in body["message"]


@pytest.mark.parametrize("kind", APPRISE_KINDS)
def test_a_channel_of_each_kind_sends_its_test_message_to_the_service(world, services, kind):
    admin = _client(world.admin)
    url = channel_urls(services.port)[kind]
    created = _add(admin, world, kind, url)
    assert created.status_code == 302, created.content.decode()[:2000]
    channel = _channel(world, f"our {kind}")
    assert url not in channel.config_encrypted  # encrypted at rest
    assert service.stored_config(channel) == {"url": url}

    tested = admin.post(reverse("channel-test", args=[channel.public_id]), follow=True)

    page = tested.content.decode()
    assert f"Test message sent to our {kind}." in page
    _assert_speaks_the_api(
        kind, services.of(kind), f"[Tokvera] test message to our {kind}", "A test message from Tokvera"
    )
    (row,) = Delivery.dangerously_unscoped.filter(channel=channel)
    assert (row.status, row.attempts, row.last_error) == (DeliveryStatus.SENT, 1, "")
    assert 'data-delivery-status="sent"' in page and "test message" in page
    for secret in (
        "xoxtokverasecret1",
        "tokvera-discord-token",
        "AAtokveraTelegramBotToken",
        "tokveraapikey01",
        "tokvera-opsgenie-key",
        "tokverasig01",
    ):
        assert secret not in page  # the list shows where it sends, never a token


def test_email_and_signed_webhook_channels_send_their_test_messages(world, settings, eager_tasks):
    settings.OUTBOUND_ALLOW = ["loopback"]
    owner = _client(world.owner)
    email = _channel(world, service.EMAIL_CHANNEL_NAME)  # every new team has it
    with webhook_receiver() as (url, received):
        assert _add(owner, world, "webhook", url, secret="hush").status_code == 302
        hook = _channel(world, "our webhook")
        owner.post(reverse("channel-test", args=[email.public_id]))
        owner.post(reverse("channel-test", args=[hook.public_id]))
    (message,) = mail.outbox
    assert message.subject == "[Tokvera] test message to Email to owners and admins"
    assert set(message.to) == {world.owner.email, world.admin.email}
    ((headers, body),) = received
    assert json.loads(body)["event"] == "test"
    assert headers["X-Tokvera-Signature"].startswith("sha256=")
    assert "hush" not in body.decode()


@pytest.mark.parametrize(
    ("kind", "url", "message"),
    [
        ("slack", "no such thing", "Apprise cannot read this as a Slack URL"),
        ("slack", "https://discord.com/api/webhooks/1234/abcd", "This is a Discord URL, not a Slack one"),
        ("telegram", "mailto://someone:pw@example.test", "not a Telegram one"),
        ("ntfy", "ntfy://10.1.2.3/topic", "Not reachable from this site."),
        ("teams", "workflows://169.254.169.254:443/wf/sig", "Not reachable from this site."),
        ("webhook", "http://127.0.0.1:9/hook", "Not reachable from this site."),
        ("webhook", "ftp://hooks.example.test/x", "Expected an http(s) URL"),
        ("discord", "", "Give the URL this channel sends to."),
    ],
)
def test_a_url_apprise_cannot_read_or_the_guard_refuses_is_a_field_error_and_nothing_is_saved(
    world, settings, kind, url, message
):
    settings.OUTBOUND_ALLOW = []
    before = NotificationChannel.dangerously_unscoped.filter(team=world.team).count()
    response = _add(_client(world.admin), world, kind, url)
    assert response.status_code == 400
    errors = response.context["form"].errors
    assert list(errors) == ["url"] and message in " ".join(errors["url"])
    assert NotificationChannel.dangerously_unscoped.filter(team=world.team).count() == before


def test_apprise_connects_only_to_the_kinds_hosts_and_only_where_the_guard_allows(world, services, settings):
    # A host the kind does not send to is refused before any connection, loopback or not.
    with (
        guarded_http.guarded_connections({"hooks.slack.com"}) as guarded,
        pytest.raises(requests.ConnectionError),
    ):
        requests.post(f"https://127.0.0.1:{services.port}/", timeout=5)
    assert guarded.refused == ["refused to connect to 127.0.0.1: not a host this channel sends to"]
    assert services.received == []

    # A fixed host that resolves to a forbidden address: judged at connect, never reached.
    channel = make_channel(world.team, "slack", name="slack", url=channel_urls(services.port)["slack"])
    settings.OUTBOUND_ALLOW = []
    row = delivery.send_test(channel, queue=False)
    assert delivery.attempt(row.pk) == "failed"
    row.refresh_from_db()
    assert row.last_error == "not reachable from this site"  # never the address it resolved to
    assert services.of("slack") == []

    # The check the channel form makes of a host the URL names, with the same verdict.
    with pytest.raises(OutboundRefused):
        guarded_http.check_host("127.0.0.1", services.port)


def _store(endpoint, values, at, on_commit):
    with time_machine.travel(at, tick=False), on_commit(execute=True):
        return scan_worker.store_report(
            Scan.dangerously_unscoped.create(endpoint=endpoint, trigger=ScanTrigger.SCHEDULE),
            report_for(values, model=endpoint.model),
        )


def test_a_failing_receiver_leaves_a_retry_row_that_a_later_run_delivers(
    world, services, eager_tasks, django_capture_on_commit_callbacks
):
    channel = make_channel(world.team, "slack", name="slack", url=channel_urls(services.port)["slack"])
    endpoint = make_endpoint(world.team, name="flaky box", alert_email=False)
    endpoint.channels.set([channel])
    services.fail_next("slack", 1)
    t0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
    scan = Scan.dangerously_unscoped.create(endpoint=endpoint, trigger=ScanTrigger.SCHEDULE)

    with time_machine.travel(t0, tick=False), django_capture_on_commit_callbacks(execute=True):
        alerts.send_alert(endpoint.pk, scan.pk, "erroring", "3 scans in a row errored")

    (row,) = Delivery.dangerously_unscoped.filter(channel=channel)
    assert (row.status, row.attempts) == (DeliveryStatus.PENDING, 1)
    assert row.next_attempt_at == t0 + timedelta(seconds=delivery.RETRY_DELAYS_S[0])
    assert "503" in row.last_error and "xoxtokverasecret1" not in row.last_error
    assert len(services.of("slack")) == 1

    with time_machine.travel(t0 + timedelta(seconds=30), tick=False):
        assert delivery.deliver_due_notifications() == 0  # not due yet
    with time_machine.travel(t0 + timedelta(seconds=61), tick=False):
        assert delivery.deliver_due_notifications() == 1
        assert delivery.deliver_due_notifications() == 0  # settled: a second run sends nothing
    row.refresh_from_db()
    assert (row.status, row.attempts, row.last_error) == (DeliveryStatus.SENT, 2, "")
    assert len(services.of("slack")) == 2
    assert "3 scans in a row errored" in services.of("slack")[-1].body["attachments"][0]["text"]

    page = _client(world.viewer).get(reverse("team-channels", args=[world.team.slug])).content.decode()
    assert 'data-delivery-status="sent"' in page and "flaky box" in page and "erroring" in page


def test_a_delivery_out_of_tries_fails_and_says_why(world, services):
    channel = make_channel(world.team, "ntfy", name="ntfy", url=channel_urls(services.port)["ntfy"])
    endpoint = make_endpoint(world.team, alert_email=False)
    endpoint.channels.set([channel])
    services.fail_next("ntfy", delivery.MAX_ATTEMPTS)
    scan = Scan.dangerously_unscoped.create(endpoint=endpoint, trigger=ScanTrigger.SCHEDULE)
    event = delivery.record(endpoint, scan, "down", alerts.payload(endpoint, scan, "down", "no answer"))
    (row,) = event.deliveries.all()
    outcomes = []
    for _ in range(delivery.MAX_ATTEMPTS):
        Delivery.dangerously_unscoped.filter(pk=row.pk, status="pending").update(
            next_attempt_at=datetime(2000, 1, 1, tzinfo=UTC)
        )
        outcomes.append(delivery.attempt(row.pk))
    assert outcomes == ["retry"] * (delivery.MAX_ATTEMPTS - 1) + ["failed"]
    row.refresh_from_db()
    assert row.status == DeliveryStatus.FAILED and row.next_attempt_at is None and row.last_error


def test_a_recovery_says_how_long_the_endpoint_was_down(
    world, services, eager_tasks, django_capture_on_commit_callbacks
):
    channel = make_channel(world.team, "ntfy", name="ntfy", url=channel_urls(services.port)["ntfy"])
    endpoint = make_endpoint(world.team, name="box", slo_grade_floor="F")
    t0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
    _store(endpoint, GRADE_A, t0, django_capture_on_commit_callbacks)
    down_scan = Scan.dangerously_unscoped.create(endpoint=endpoint, trigger=ScanTrigger.SCHEDULE)
    with (
        time_machine.travel(t0 + timedelta(minutes=5), tick=False),
        django_capture_on_commit_callbacks(execute=True),
    ):
        Scan.dangerously_unscoped.filter(pk=down_scan.pk).update(
            status="succeeded", down=True, finished_at=t0 + timedelta(minutes=5)
        )
        down_scan.refresh_from_db()
        delivery.record(
            endpoint, down_scan, "down", alerts.payload(endpoint, down_scan, "down", "the endpoint is down")
        )
    back = Scan.dangerously_unscoped.create(endpoint=endpoint, trigger=ScanTrigger.SCHEDULE)
    Scan.dangerously_unscoped.filter(pk=back.pk).update(
        status="succeeded", finished_at=t0 + timedelta(minutes=42)
    )
    back.refresh_from_db()
    with django_capture_on_commit_callbacks(execute=True):
        event = delivery.record(
            endpoint, back, "down_recovered", alerts.payload(endpoint, back, "down_recovered", "it answers")
        )
    assert event.message["lasted_s"] == 37 * 60 and event.message["lasted"] == "Down for 37 min."
    sent = [r.body for r in services.of("ntfy")]
    assert sent[-1]["title"] == "[Tokvera] box: down recovered"
    assert "Down for 37 min." in sent[-1]["message"] and f"/scans/{back.public_id}/" in sent[-1]["message"]
    mail_body = next(m.body for m in mail.outbox if "down recovered" in m.subject)
    assert "Down for 37 min." in mail_body  # every channel says the same
    assert channel.pk in set(
        Delivery.dangerously_unscoped.filter(event=event).values_list("channel_id", flat=True)
    )


def test_an_endpoint_alerts_every_channel_unless_it_picks_some(world):
    email = _channel(world, service.EMAIL_CHANNEL_NAME)
    hook = make_channel(world.team, "webhook", name="hook", url="https://hooks.example.test/x")
    make_channel(world.team, "webhook", name="off", url="https://hooks.example.test/y", enabled=False)
    everything = make_endpoint(world.team, name="all")
    picky = make_endpoint(world.team, name="picky")
    owner = _client(world.owner)
    form = owner.get(reverse("endpoint-edit", args=[picky.public_id])).content.decode()
    assert "Alert every channel of the team" in form and "hook (Webhook (signed))" in form
    assert "off (Webhook (signed), turned off)" in form
    data = {
        "name": "picky",
        "base_url": picky.base_url,
        "model": picky.model,
        "mode": "scheduled",
        "levels_text": "1, 4",
        "max_tokens": 16,
        "timeout_s": 10,
        "interval_minutes": 60,
        "enabled": "on",
        "slo_grade_floor": "B",
        "slo_objective": 0.9,
        "alert_after_errors": 3,
        "channels": [str(hook.public_id)],
    }
    assert owner.post(reverse("endpoint-edit", args=[picky.public_id]), data).status_code == 302
    picky = Endpoint.dangerously_unscoped.get(pk=picky.pk)
    assert not picky.all_channels
    assert delivery.channels_for(everything) == [email, hook]  # enabled ones only
    assert delivery.channels_for(picky) == [hook]


def test_deleting_a_channel_takes_its_history_and_leaves_the_events(world, services):
    channel = make_channel(world.team, "ntfy", name="ntfy", url=channel_urls(services.port)["ntfy"])
    row = delivery.send_test(channel, queue=False)
    delivery.attempt(row.pk)
    owner = _client(world.owner)
    confirm = owner.get(reverse("channel-delete", args=[channel.public_id])).content.decode()
    assert "Its 1 delivery of history" in confirm
    assert owner.post(reverse("channel-delete", args=[channel.public_id])).status_code == 302
    assert not Delivery.dangerously_unscoped.filter(pk=row.pk).exists()
    assert AlertEvent.dangerously_unscoped.filter(team=world.team, kind="test").exists()


def test_a_new_team_starts_with_its_email_channel(world):
    (channel,) = NotificationChannel.dangerously_unscoped.filter(team=world.other_team)
    assert (channel.kind, channel.name, channel.enabled) == ("email", "Email to owners and admins", True)


def test_a_recovery_resolves_the_incident_its_down_alert_opened_on_pagerduty_and_opsgenie(
    world, services, eager_tasks, django_capture_on_commit_callbacks
):
    urls = channel_urls(services.port)
    for kind in ("pagerduty", "opsgenie"):
        make_channel(world.team, kind, name=kind, url=urls[kind])
    endpoint = make_endpoint(world.team, name="pager box")
    other = make_endpoint(world.team, name="other box")
    t0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)

    def alert(endpoint, kind, minutes):
        scan = Scan.dangerously_unscoped.create(endpoint=endpoint, trigger=ScanTrigger.SCHEDULE)
        Scan.dangerously_unscoped.filter(pk=scan.pk).update(
            status="succeeded", down=kind == "down", finished_at=t0 + timedelta(minutes=minutes)
        )
        scan.refresh_from_db()
        with django_capture_on_commit_callbacks(execute=True):
            delivery.record(endpoint, scan, kind, alerts.payload(endpoint, scan, kind, kind))

    alert(endpoint, "down", 0)
    alert(other, "down", 1)
    key, other_key = f"tokvera-{endpoint.public_id}-down", f"tokvera-{other.public_id}-down"
    trigger = services.of("pagerduty")[0].body
    assert (trigger["event_action"], trigger["dedup_key"]) == ("trigger", key)
    opened = services.of("opsgenie")[0]
    assert opened.path == "/v2/alerts" and opened.body["alias"] == key
    assert services.incidents == {
        ("pagerduty", key): "triggered", ("opsgenie", key): "open",
        ("pagerduty", other_key): "triggered", ("opsgenie", other_key): "open",
    }

    alert(endpoint, "down_recovered", 37)

    resolve = services.of("pagerduty")[-1].body
    assert resolve == {"routing_key": "tokverarouting01", "event_action": "resolve", "dedup_key": key}
    closed = services.of("opsgenie")[-1]
    assert closed.path == f"/v2/alerts/{key}/close?identifierType=alias"
    assert closed.headers["Authorization"] == "GenieKey tokvera-opsgenie-key"
    assert "Down for 37 min." in closed.body["note"]
    # The incident the down alert opened is resolved; the other endpoint's stays open.
    assert services.incidents == {
        ("pagerduty", key): "resolved", ("opsgenie", key): "closed",
        ("pagerduty", other_key): "triggered", ("opsgenie", other_key): "open",
    }
    assert set(Delivery.dangerously_unscoped.filter(channel__team=world.team).exclude(
        channel__kind="email").values_list("status", flat=True)) == {DeliveryStatus.SENT}
