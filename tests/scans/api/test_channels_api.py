"""The notification channels API: create, read, update, delete, send test and the
delivery history, against loopback stand-ins that speak each service's API
(tests/helpers/notify_services.py). URLs and secrets are write-only; a URL Apprise cannot read
or the guard refuses is a 422 at `url` with nothing saved; read-only callers cannot write;
another team's channel is a 404; an endpoint's chosen channels are the ones it alerts."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from django.urls import reverse

from scans.models import Delivery, DeliveryStatus, NotificationChannel, Scan, ScanTrigger
from scans.notify import alerts
from scans.notify.channels import delivery, kinds, service
from tests.conftest import bearer
from tests.helpers.factories import make_channel, make_endpoint
from tests.helpers.notify_services import channel_urls, running_services
from tests.helpers.servers import webhook_receiver

pytestmark = pytest.mark.django_db

APPRISE_KINDS = ("slack", "teams", "discord", "telegram", "pagerduty", "opsgenie", "ntfy")
# A piece of each kind's URL that is a token: never in an answer.
TOKENS = ("xoxtokverasecret1", "tokverasig01", "tokvera-discord-token", "AAtokveraTelegramBotToken",
          "tokveraapikey01", "tokvera-opsgenie-key", "tokvera-alerts")


@pytest.fixture
def services(tmp_path, settings, monkeypatch, eager_tasks):
    """The stand-ins, reachable: loopback allowed, the services' fixed hosts resolved to them,
    their CA trusted (as REQUESTS_CA_BUNDLE does for a deployment's own CA). A test message is
    sent by a worker: here, in the test's process (eager_tasks)."""
    with running_services(tmp_path) as stand_ins:
        settings.OUTBOUND_ALLOW = ["loopback"]
        settings.OUTBOUND_RESOLVE = stand_ins.resolve()
        monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(stand_ins.ca_path))
        yield stand_ins


def _list_url() -> str:
    return reverse("api-channel-list")


def _url(name: str, channel_id) -> str:
    return reverse(f"api-channel-{name}", kwargs={"public_id": channel_id})


def _create(api, token, **fields):
    return api.post(_list_url(), fields, format="json", **bearer(token))


def _count(world) -> int:
    return NotificationChannel.dangerously_unscoped.filter(team=world.team).count()


@pytest.mark.parametrize("kind", APPRISE_KINDS)
def test_a_channel_of_each_kind_is_added_and_its_test_reaches_the_service(world, api, services, kind):
    url = channel_urls(services.port)[kind]
    created = _create(api, world.read_write_token, kind=kind, name=f"our {kind}", url=url)

    assert created.status_code == 201, created.json()
    body = created.json()
    assert (body["kind"], body["team"], body["has_url"], body["has_secret"]) == (
        kind, world.team.slug, True, False)
    assert body["destination"] and url not in created.content.decode()
    channel = NotificationChannel.dangerously_unscoped.get(public_id=body["id"])
    assert url not in channel.config_encrypted and service.stored_config(channel) == {"url": url}

    tested = api.post(_url("test", body["id"]), **bearer(world.read_write_token))

    assert tested.status_code == 202, tested.json()
    answer = tested.json()
    assert answer["outcome"] == "sent"
    assert (answer["delivery"]["status"], answer["delivery"]["attempts"]) == ("sent", 1)
    assert answer["delivery"]["event_kind"] == "test" and answer["delivery"]["endpoint"] is None
    (received,) = services.of(kind)
    assert f"[Tokvera] test message to our {kind}" in json.dumps(received.body)
    history = api.get(_url("deliveries", body["id"]), **bearer(world.read_only_token)).json()
    assert [(d["event_kind"], d["status"]) for d in history["results"]] == [("test", "sent")]
    shown = created.content.decode() + tested.content.decode() + json.dumps(history) + api.get(
        _url("detail", body["id"]), **bearer(world.read_only_token)).content.decode()
    assert not [token for token in TOKENS if token in shown]


def test_a_webhooks_secret_is_write_only_signs_the_test_and_is_removed_by_an_empty_string(
    world, api, settings, eager_tasks
):
    settings.OUTBOUND_ALLOW = ["loopback"]
    with webhook_receiver() as (url, received):
        created = _create(api, world.read_write_token, kind="webhook", name="hook", url=url,
                          secret="hush-hush-123")
        assert created.status_code == 201, created.json()
        assert created.json()["has_secret"] is True and "hush-hush-123" not in created.content.decode()
        channel_id = created.json()["id"]
        assert api.post(_url("test", channel_id), **bearer(world.read_write_token)).json()[
            "outcome"] == "sent"
        ((headers, body),) = received
        assert headers["X-Tokvera-Signature"] == kinds.sign("hush-hush-123", body)

        renamed = api.patch(_url("detail", channel_id), {"name": "signed hook"}, format="json",
                            **bearer(world.read_write_token))
        assert renamed.json()["has_secret"] is True  # what was not sent is kept, URL included
        cleared = api.patch(_url("detail", channel_id), {"secret": ""}, format="json",
                            **bearer(world.read_write_token))
        assert (cleared.json()["has_secret"], cleared.json()["has_url"]) == (False, True)
        api.post(_url("test", channel_id), **bearer(world.read_write_token))
        assert "X-Tokvera-Signature" not in received[-1][0]


def test_a_signed_webhooks_url_moves_without_a_new_secret_only_for_owners_and_admins(world, api):
    channel = make_channel(world.team, "webhook", name="hook", url="https://hooks.example.test/a",
                           secret="hush")
    url = _url("detail", channel.public_id)
    moved = {"url": "https://elsewhere.example.test/b"}
    refused = api.patch(url, moved, format="json", **bearer(world.read_write_token))
    assert refused.status_code == 403 and "signing secret" in refused.json()["detail"]
    assert service.stored_config(NotificationChannel.dangerously_unscoped.get(pk=channel.pk)) == {
        "url": "https://hooks.example.test/a", "secret": "hush"}
    with_secret = api.patch(url, {**moved, "secret": "new-hush"}, format="json",
                            **bearer(world.read_write_token))
    assert with_secret.status_code == 200 and with_secret.json()["has_secret"] is True
    api.force_authenticate(world.admin)
    back = api.patch(url, {"url": "https://hooks.example.test/a"}, format="json")
    assert back.status_code == 200 and back.json()["has_secret"] is False  # another origin: dropped


@pytest.mark.parametrize(
    ("kind", "url", "message"),
    [
        ("slack", "no such thing", "Apprise cannot read this as a Slack URL"),
        ("slack", "https://discord.com/api/webhooks/1234/abcd", "This is a Discord URL, not a Slack one"),
        ("pagerduty", "pagerduty://", "Apprise cannot read this as a PagerDuty URL"),
        ("ntfy", "ntfy://10.1.2.3/topic", "Not reachable from this site."),
        ("teams", "workflows://169.254.169.254:443/wf/sig", "Not reachable from this site."),
        ("webhook", "http://127.0.0.1:9/hook", "Not reachable from this site."),
        ("discord", "", "Give the URL this channel sends to."),
    ],
)
def test_a_url_apprise_cannot_read_or_the_guard_refuses_is_a_422_at_url_and_nothing_is_saved(
    world, api, settings, kind, url, message
):
    settings.OUTBOUND_ALLOW = []
    before = _count(world)
    response = _create(api, world.read_write_token, kind=kind, name="bad", url=url)
    assert response.status_code == 422
    assert list(response.json()) == ["url"] and message in " ".join(response.json()["url"])
    assert _count(world) == before


def test_a_bad_url_on_an_edit_keeps_the_stored_one(world, api, settings):
    settings.OUTBOUND_ALLOW = []
    channel = make_channel(world.team, "ntfy", name="phone", url="https://ntfy.sh/tokvera-topic")
    response = api.patch(_url("detail", channel.public_id),
                         {"name": "renamed", "url": "ntfy://10.1.2.3/topic"}, format="json",
                         **bearer(world.read_write_token))
    assert response.status_code == 422 and "url" in response.json()
    channel.refresh_from_db()
    assert channel.name == "phone"
    assert service.stored_config(channel) == {"url": "https://ntfy.sh/tokvera-topic"}


@pytest.mark.parametrize(
    ("fields", "field", "message", "status"),
    [
        # Not what the schema describes: 400; well formed but unusable: 422; a clash: 409.
        ({"kind": "slack", "secret": "x"}, "secret", "Only webhooks are signed", 422),
        ({"kind": "email", "name": "Email to owners and admins"}, "name", "a channel of this name",
         409),
        ({"kind": "carrier pigeon"}, "kind", "not a valid choice", 400),
        ({"kind": "email", "name": "two\nlines"}, "name", "", 400),
    ],
)
def test_other_bad_input_is_refused_naming_the_field(world, api, services, fields, field, message,
                                                     status):
    before = _count(world)
    data = {"name": "new one", "url": channel_urls(services.port)["slack"], **fields}
    response = _create(api, world.read_write_token, **data)
    assert response.status_code == status, response.json()
    assert field in response.json() and message in " ".join(response.json()[field])
    assert _count(world) == before


def test_a_channel_keeps_its_kind(world, api):
    email = NotificationChannel.dangerously_unscoped.get(team=world.team, kind="email")
    response = api.patch(_url("detail", email.public_id), {"kind": "slack"}, format="json",
                         **bearer(world.read_write_token))
    assert response.status_code == 409 and "keeps its kind" in response.json()["kind"][0]


def test_read_only_callers_cannot_write_and_another_teams_channel_is_404(world, api, services):
    channel = make_channel(world.team, "slack", name="slack", url=channel_urls(services.port)["slack"])
    writes = [
        ("post", _list_url(), {"kind": "email", "name": "mine"}),
        ("patch", _url("detail", channel.public_id), {"name": "renamed"}),
        ("put", _url("detail", channel.public_id), {"kind": "slack", "name": "renamed"}),
        ("delete", _url("detail", channel.public_id), None),
        ("post", _url("test", channel.public_id), None),
    ]
    for method, url, data in writes:
        response = getattr(api, method)(url, data, format="json", **bearer(world.read_only_token))
        assert response.status_code == 403, (method, url, response.json())
    api.force_authenticate(world.viewer)
    assert api.patch(_url("detail", channel.public_id), {"name": "x"}, format="json").status_code == 403
    api.force_authenticate(None)
    for name in ("detail", "deliveries", "test"):
        send = api.post if name == "test" else api.get
        assert send(_url(name, channel.public_id), **bearer(world.other_team_token)).status_code == 404
    assert services.received == []  # no test message was sent by anyone refused
    channel.refresh_from_db()
    assert channel.name == "slack"
    listed = api.get(_list_url(), **bearer(world.other_team_token)).json()["results"]
    assert str(channel.public_id) not in json.dumps(listed)


def test_a_failed_test_says_why_and_is_not_tried_again(world, api, services):
    channel = make_channel(world.team, "discord", name="discord", url=channel_urls(services.port)["discord"])
    services.fail_next("discord", 1)
    answer = api.post(_url("test", channel.public_id), **bearer(world.read_write_token)).json()
    assert answer["outcome"] == "failed"
    assert answer["delivery"]["status"] == "failed" and answer["delivery"]["next_attempt_at"] is None
    assert answer["delivery"]["last_error"] == "Discord answered HTTP 503"

    assert delivery.deliver_due_notifications() == 0  # nothing of it is due again
    history = api.get(_url("deliveries", channel.public_id), **bearer(world.read_only_token)).json()
    assert [(d["status"], d["attempts"]) for d in history["results"]] == [("failed", 1)]
    assert len(services.of("discord")) == 1


def test_the_history_is_newest_first_in_pages_with_each_alerts_endpoint_and_scan(world, api, services):
    channel = make_channel(world.team, "ntfy", name="ntfy", url=channel_urls(services.port)["ntfy"])
    endpoint = make_endpoint(world.team, name="box", all_channels=False)
    endpoint.channels.set([channel])
    scan = Scan.dangerously_unscoped.create(endpoint=endpoint, trigger=ScanTrigger.SCHEDULE)
    first = delivery.send_test(channel, queue=False)
    Delivery.dangerously_unscoped.filter(pk=first.pk).update(
        created_at=datetime(2026, 1, 1, tzinfo=UTC))
    event = delivery.record(endpoint, scan, "erroring",
                            alerts.payload(endpoint, scan, "erroring", "3 scans in a row errored"))
    assert event is not None

    page = api.get(_url("deliveries", channel.public_id) + "?page_size=1",
                   **bearer(world.read_only_token)).json()
    (newest,) = page["results"]
    assert (newest["event_kind"], newest["endpoint"], newest["scan"], newest["status"]) == (
        "erroring", str(endpoint.public_id), str(scan.public_id), "pending")
    older = api.get(page["next"], **bearer(world.read_only_token)).json()
    assert [d["event_kind"] for d in older["results"]] == ["test"]


def test_an_endpoints_chosen_channels_are_set_on_the_endpoint_and_only_they_are_alerted(
    world, api, services
):
    urls = channel_urls(services.port)
    slack = _create(api, world.read_write_token, kind="slack", name="slack", url=urls["slack"]).json()
    _create(api, world.read_write_token, kind="ntfy", name="ntfy", url=urls["ntfy"])
    endpoint = make_endpoint(world.team, name="picky")
    url = reverse("api-endpoint-detail", kwargs={"public_id": endpoint.public_id})
    assert api.get(url, **bearer(world.read_only_token)).json()["all_channels"] is True  # the default

    picked = api.patch(url, {"all_channels": False, "channels": [slack["id"]]}, format="json",
                       **bearer(world.read_write_token))

    assert picked.status_code == 200, picked.json()
    assert (picked.json()["all_channels"], picked.json()["channels"]) == (False, [slack["id"]])
    endpoint.refresh_from_db()  # as the worker reads it
    scan = Scan.dangerously_unscoped.create(endpoint=endpoint, trigger=ScanTrigger.SCHEDULE)
    event = delivery.record(endpoint, scan, "erroring",
                            alerts.payload(endpoint, scan, "erroring", "errored"))
    assert event is not None
    for row in Delivery.dangerously_unscoped.filter(event=event):
        delivery.attempt(row.pk)
    assert len(services.of("slack")) == 1 and services.of("ntfy") == []
    history = api.get(_url("deliveries", slack["id"]), **bearer(world.read_only_token)).json()
    assert [d["endpoint"] for d in history["results"]] == [str(endpoint.public_id)]


def test_deleting_a_channel_takes_it_off_the_endpoints_and_its_history_with_it(world, api, services):
    channel = make_channel(world.team, "ntfy", name="ntfy", url=channel_urls(services.port)["ntfy"])
    endpoint = make_endpoint(world.team, name="picky", all_channels=False)
    endpoint.channels.set([channel])
    api.post(_url("test", channel.public_id), **bearer(world.read_write_token))

    assert api.delete(_url("detail", channel.public_id), **bearer(world.read_write_token)).status_code == 204

    assert not NotificationChannel.dangerously_unscoped.filter(pk=channel.pk).exists()
    assert not Delivery.dangerously_unscoped.filter(channel_id=channel.pk).exists()
    assert list(endpoint.channels.all()) == []
    assert api.get(_url("detail", channel.public_id), **bearer(world.read_write_token)).status_code == 404


def test_a_disabled_channel_is_listed_and_its_test_fails_saying_why(world, api, services):
    created = _create(api, world.read_write_token, kind="ntfy", name="off",
                      url=channel_urls(services.port)["ntfy"], enabled=False).json()
    listed = api.get(_list_url(), **bearer(world.read_only_token)).json()["results"]
    assert {c["name"]: c["enabled"] for c in listed} == {"Email to owners and admins": True, "off": False}
    answer = api.post(_url("test", created["id"]), **bearer(world.read_write_token)).json()
    assert answer["outcome"] == "failed" and answer["delivery"]["last_error"] == "the channel is turned off"
    assert answer["delivery"]["status"] == DeliveryStatus.FAILED and services.of("ntfy") == []
