"""Liveness probes between graded scans, as a team sees them: a down endpoint is noticed by
probes (the scan's preflight alone) against real loopback servers, confirmed by two failed
probes in a row before anyone is told, told once, and told again when two good probes in a row
say it answers (with a graded scan brought forward); one lost request never alerts; a result
that says nothing about the endpoint (the guard's refusal) counts for nothing; maintenance
holds the news; the dashboard, the endpoint page, the API and the status page's availability
show what the probes found."""

from __future__ import annotations

import asyncio
import contextlib
import json
from datetime import timedelta

import pytest
from django.core import mail
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from scans.grader import probe_many, probe_plan
from scans.grader.demo_server import running_target
from scans.history import state as endpoint_state
from scans.liveness import dispatch, record
from scans.liveness import worker as probe_worker
from scans.models import (
    AlertEvent,
    Endpoint,
    LivenessState,
    MaintenanceWindow,
    OriginLock,
    ProbeHour,
    ProbeResult,
)
from scans.origins import origin_of
from scans.status_pages.availability import daily_availability
from tests.conftest import bearer
from tests.helpers.factories import make_endpoint
from tests.helpers.servers import raw_server

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _loopback(settings):
    settings.OUTBOUND_ALLOW = ["loopback"]


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Switchable:
    """A raw OpenAI-compatible server that answers, or answers every request 500, as told."""

    def __init__(self) -> None:
        self.failing = False

    async def __call__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            if length:
                await reader.readexactly(length)
            if b"/models" in head.split(b"\r\n", 1)[0]:
                body = json.dumps({"object": "list", "data": [{"id": "m"}]}).encode()
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                             b"content-length: %d\r\n\r\n%s" % (len(body), body))
            elif self.failing:
                body = b'{"error": {"message": "the model server crashed"}}'
                writer.write(b"HTTP/1.1 500 Internal Server Error\r\ncontent-type: "
                             b"application/json\r\ncontent-length: %d\r\n\r\n%s"
                             % (len(body), body))
            else:
                events = b"".join(
                    b"data: " + json.dumps({"choices": [{"index": 0, "delta": {"content": t}}]})
                    .encode() + b"\n\n" for t in ("o", "k")) + b"data: [DONE]\n\n"
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                             b"content-length: %d\r\n\r\n%s" % (len(events), events))
            await writer.drain()


@contextlib.contextmanager
def switchable():
    server = Switchable()
    with raw_server(server) as port:
        yield server, f"http://127.0.0.1:{port}/v1"


def _probe(*endpoints: Endpoint) -> None:
    """One round of probes from the site's location, as a worker runs a batch."""
    assert probe_worker.probe_batch([e.pk for e in endpoints], "site") == len(endpoints)


def _kinds(endpoint: Endpoint) -> list[str]:
    return list(AlertEvent.dangerously_unscoped.filter(endpoint=endpoint)
                .order_by("created_at").values_list("kind", flat=True))


def _fresh(endpoint: Endpoint) -> Endpoint:
    return Endpoint.dangerously_unscoped.get(pk=endpoint.pk)


def test_probes_say_whether_each_endpoint_answers_and_why_not():
    with running_target() as (host, port), raw_server(_unauthorized) as locked:
        plans = [probe_plan(f"http://{host}:{port}/v1", "demo", None, 10.0),
                 probe_plan(f"http://127.0.0.1:{_closed_port()}/v1", "demo", None, 10.0),
                 probe_plan(f"http://127.0.0.1:{locked}/v1", "demo", "sk-secret-key-123", 10.0)]
        up, refused, unauthorized = asyncio.run(probe_many(plans, connect_guard=None))
    assert up.ok and up.ttft_ms is not None and up.status_code == 200 and up.cause == ""
    assert not refused.ok and not refused.reachable and refused.kind == "connection_refused"
    assert "connection refused (nothing is listening there)" in refused.cause
    assert not unauthorized.ok and unauthorized.reachable and unauthorized.status_code == 401
    assert unauthorized.kind == "auth" and "the API key sent was refused" in unauthorized.cause
    assert "sk-secret-key-123" not in unauthorized.cause  # masked, as the preflight masks it


async def _unauthorized(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.readuntil(b"\r\n\r\n")
    body = b'{"error": {"message": "invalid key sk-secret-key-123"}}'
    writer.write(b"HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\n"
                 b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(body), body))
    await writer.drain()


def test_a_down_endpoint_is_confirmed_by_two_probes_told_once_and_told_when_it_answers(
        world, django_capture_on_commit_callbacks, eager_tasks):
    with switchable() as (server, url):
        endpoint = make_endpoint(world.team, base_url=url, model="m")
        _probe(endpoint)
        assert _fresh(endpoint).liveness == "up"

        server.failing = True
        _probe(endpoint)  # one failed probe: not news yet
        assert _fresh(endpoint).liveness == "up" and _kinds(endpoint) == []
        with django_capture_on_commit_callbacks(execute=True):
            _probe(endpoint)  # the second in a row confirms it
        down = _fresh(endpoint)
        assert down.liveness == "down" and "HTTP 500" in down.liveness_cause
        assert "the model server crashed" in down.liveness_cause
        assert _kinds(endpoint) == ["down"]
        (message,) = mail.outbox
        assert "down" in message.subject and "2 probes in a row failed" in message.body
        assert f"/endpoints/{endpoint.public_id}/" in message.body  # no scan: the endpoint's page
        # Between graded scans the endpoint's state is down, with the probes' cause.
        shown = endpoint_state.current(down)
        assert shown.state == "down" and "HTTP 500" in shown.cause
        _probe(endpoint)  # still down: nothing new to say
        assert _kinds(endpoint) == ["down"]

        server.failing = False
        Endpoint.dangerously_unscoped.filter(pk=endpoint.pk).update(
            next_scan_at=timezone.now() + timedelta(minutes=50))
        _probe(endpoint)
        assert _fresh(endpoint).liveness == "down"  # one good probe is not a recovery
        with django_capture_on_commit_callbacks(execute=True):
            _probe(endpoint)
    back = _fresh(endpoint)
    assert back.liveness == "up" and _kinds(endpoint) == ["down", "down_recovered"]
    assert back.next_scan_at <= timezone.now()  # a graded scan soon says how well it answers
    recovered = AlertEvent.dangerously_unscoped.get(endpoint=endpoint, kind="down_recovered")
    assert recovered.message["lasted_s"] is not None and recovered.message["lasted"]
    assert "answers again" in mail.outbox[-1].body
    # Each probe is kept, and its hour adds up.
    assert ProbeResult.dangerously_unscoped.filter(endpoint=endpoint).count() == 6
    (hour,) = ProbeHour.dangerously_unscoped.filter(endpoint=endpoint)
    assert (hour.probes, hour.failed) == (6, 3)
    assert hour.covered_s == 6 * endpoint.probe_interval_s
    assert hour.down_s == 3 * endpoint.probe_interval_s


def test_a_lost_request_now_and_then_never_alerts(world):
    with switchable() as (server, url):
        steady = make_endpoint(world.team, name="steady", base_url=url, model="m")
        eager = make_endpoint(world.team, name="eager", base_url=url, model="m", confirm_after=1)
        for failing in (False, True, False, True, False, True, False):
            server.failing = failing
            _probe(steady, eager)
    assert _kinds(steady) == []  # never two failures in a row: nothing to tell
    assert _fresh(steady).liveness == "up"
    # A team that asked for no confirmation hears of every change.
    assert _kinds(eager) == ["down", "down_recovered"] * 3


def test_a_probe_the_guard_refuses_says_nothing_about_the_endpoint(world, settings):
    with switchable() as (_, url):
        endpoint = make_endpoint(world.team, base_url=url, model="m")
        settings.OUTBOUND_ALLOW = []  # the site may no longer reach loopback
        for _ in range(3):
            _probe(endpoint)
    probes = ProbeResult.dangerously_unscoped.filter(endpoint=endpoint)
    assert probes.count() == 3 and not probes.filter(counted=True).exists()
    assert all("refused by the outbound guard" in p.cause for p in probes)
    assert _fresh(endpoint).liveness == "" and _kinds(endpoint) == []
    (standing,) = LivenessState.dangerously_unscoped.filter(endpoint=endpoint)
    assert (standing.failures, standing.down) == (0, False)


def test_a_maintenance_window_holds_the_news_until_it_ends(world):
    dead = make_endpoint(world.team, base_url=f"http://127.0.0.1:{_closed_port()}/v1")
    now = timezone.now()
    window = MaintenanceWindow.dangerously_unscoped.create(
        team=world.team, endpoint=dead, name="upgrade", starts_at=now - timedelta(minutes=5),
        ends_at=now + timedelta(minutes=30))
    for _ in range(3):
        _probe(dead)
    assert _fresh(dead).liveness == "" and _kinds(dead) == []  # held
    window.ends_at = timezone.now() - timedelta(seconds=1)
    window.save()
    _probe(dead)  # the first result after the window tells what still holds
    assert _fresh(dead).liveness == "down" and _kinds(dead) == ["down"]


def test_a_team_that_asks_is_reminded_while_it_stays_down(world):
    dead = make_endpoint(world.team, base_url=f"http://127.0.0.1:{_closed_port()}/v1",
                         renotify_minutes=30)
    quiet = make_endpoint(world.team, name="quiet",
                          base_url=f"http://127.0.0.1:{_closed_port()}/v1")
    for _ in range(3):
        _probe(dead, quiet)
    assert _kinds(dead) == ["down"] and _kinds(quiet) == ["down"]
    Endpoint.dangerously_unscoped.filter(pk__in=[dead.pk, quiet.pk]).update(
        liveness_notified_at=timezone.now() - timedelta(minutes=31))
    _probe(dead, quiet)
    _probe(dead, quiet)  # once per period, however many probes
    assert _kinds(dead) == ["down", "still_down"] and _kinds(quiet) == ["down"]
    reminder = AlertEvent.dangerously_unscoped.get(endpoint=dead, kind="still_down")
    assert reminder.message["detail"].startswith("the endpoint is still down, for ")


def test_the_beat_probes_each_endpoint_once_per_interval_and_spares_a_scanning_origin(
        world, eager_tasks):
    with switchable() as (_, url), switchable() as (_, busy_url):
        free = make_endpoint(world.team, name="free", base_url=url, model="m")
        busy = make_endpoint(world.team, name="busy", base_url=busy_url, model="m")
        OriginLock.objects.create(origin=origin_of(busy_url), scan_id=1,
                                  expires_at=timezone.now() + timedelta(minutes=5))
        pushed = make_endpoint(world.team, name="pushed", base_url=url, mode="pushed")
        assert dispatch.dispatch_due() == 1  # the busy origin's scan speaks for it
        assert dispatch.dispatch_due() == 0  # nothing is due again before its interval
    assert ProbeResult.dangerously_unscoped.filter(endpoint=free).count() == 1
    assert not ProbeResult.dangerously_unscoped.filter(endpoint__in=[busy, pushed]).exists()
    following = _fresh(free).next_probe_at
    assert timedelta(seconds=55) < following - timezone.now() <= timedelta(seconds=60)


def test_probes_count_in_the_status_pages_availability(world):
    endpoint = make_endpoint(world.team, base_url=f"http://127.0.0.1:{_closed_port()}/v1")
    now = timezone.now()
    for failed in (True, True, False, False):  # what two failed probes and two good leave
        record.record("site", [record.Probed(
            endpoint.pk, 60, 2, now,
            probe_result(ok=not failed))])
    (today,) = daily_availability([_fresh(endpoint)], days=1, now=now + timedelta(seconds=1))[
        endpoint.pk]
    assert (today.covered_s, today.down_s) == (240.0, 120.0)
    assert today.availability == 0.5 and today.kind == "partial"


def probe_result(ok: bool):
    from scans.grader import LivenessResult

    return LivenessResult(ok=ok, reachable=ok, status_code=200 if ok else None,
                          ttft_ms=12.0 if ok else None,
                          cause="" if ok else "could not connect: connection refused",
                          kind="" if ok else "connection_refused", model_listed=None,
                          duration_ms=1.0)


def test_the_api_shows_the_verdict_and_lists_probes_only_to_the_team(world, api):
    dead = make_endpoint(world.team, base_url=f"http://127.0.0.1:{_closed_port()}/v1")
    for _ in range(2):
        _probe(dead)
    url = f"/api/v1/endpoints/{dead.public_id}/"
    body = api.get(url, **bearer(world.read_only_token)).json()
    assert body["liveness"]["state"] == "down" and body["state"]["state"] == "down"
    (site,) = body["liveness"]["locations"]
    assert site["location"] == "site" and site["down"] and site["failures"] == 2
    assert (body["probe_interval_s"], body["confirm_after"]) == (60, 2)
    probes = api.get(url + "probes/", **bearer(world.read_only_token)).json()
    assert [p["ok"] for p in probes["results"]] == [False, False]
    assert "connection refused" in probes["results"][0]["cause"]
    assert api.get(url + "probes/", **bearer(world.other_team_token)).status_code == 404
    # The settings are the team's to change, within their bounds.
    changed = api.patch(url, {"probe_interval_s": 10}, format="json",
                        **bearer(world.read_write_token))
    assert changed.status_code == 400 and "probe_interval_s" in changed.json()
    changed = api.patch(url, {"probe_interval_s": 120, "confirm_after": 3,
                              "renotify_minutes": 60}, format="json",
                        **bearer(world.read_write_token))
    assert changed.status_code == 200, changed.content
    assert (changed.json()["probe_interval_s"], changed.json()["confirm_after"]) == (120, 3)


def test_the_endpoint_page_shows_each_locations_latest_probes(world):
    dead = make_endpoint(world.team, base_url=f"http://127.0.0.1:{_closed_port()}/v1")
    for _ in range(3):
        _probe(dead)
    client = Client()
    client.force_login(world.viewer)
    page = client.get(reverse("endpoint-detail", args=[dead.public_id])).content.decode()
    assert 'data-liveness="down"' in page and 'data-location-state="down"' in page
    assert page.count('class="probe probe-failed"') == 3
    assert "connection refused (nothing is listening there)" in page
    assert 'data-state="down"' in page  # the state card says so between graded scans
    form = client.get(reverse("endpoint-edit", args=[dead.public_id]))
    assert form.status_code == 403  # a viewer reads, never edits
