"""Issue 22 on the site, end to end: an endpoint whose profile turns the capacity search on is
scanned by a real Celery worker (Redis, the real database) against `tokvera target` with six
decode slots, and what its team sees follows: the endpoint page says how many concurrent
streams it serves within its SLO, the capacity API returns the trend, the team's gauge has the
sample, and a capacity below the team's threshold is one alert (email and a signed webhook to a
loopback server), not one per scan, with one more when it recovers.

The target's delays make the truth known: a stream takes 40 ms to its first token and 100 ms
in all, so a request that waits for a slot has a TTFT of about 100 ms or more, one that does
not about 40 ms; the TTFT target is 80 ms, so the capacity is the number of slots."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families
from rest_framework.test import APIClient

from scans.grader.demo_server import TargetConfig, running_target
from scans.models import Endpoint, Scan, ScanStatus, ScanTrigger
from scans.running import dispatch
from tests.conftest import bearer
from tests.helpers import workers
from tests.helpers.factories import make_endpoint
from tests.helpers.processes import wait_for
from tests.helpers.servers import webhook_receiver
from tests.helpers.workers import stop, worker_env
from tokvera_site.celery import app

pytestmark = [pytest.mark.redis, pytest.mark.django_db(transaction=True)]

SLOTS = 6
SLOTTED = TargetConfig(ttft_ms=40, itl_ms=20, tokens=4, max_concurrency=SLOTS)
ROOMY = TargetConfig(ttft_ms=40, itl_ms=20, tokens=4, max_concurrency=16)
THRESHOLD = 8


@pytest.fixture
def receiver():
    """The loopback webhook receiver (tests/helpers/servers.py): its URL and every POST."""
    with webhook_receiver() as (url, received):
        yield url, received


@pytest.fixture(autouse=True)
def _empty_queue():
    app.control.purge()
    yield
    app.control.purge()


def _mails(folder: Path) -> list[str]:
    """The capacity mails only: a six-slot target at 16 streams is also graded below its floor
    and misses its TTFT target, which alert on their own."""
    mails = [p.read_text() for p in sorted(folder.glob("*.log"), key=lambda p: p.stat().st_mtime)]
    return [m for m in mails if "capacity" in m.split("\n\n", 1)[0].lower()]


def _capacity_events(receiver) -> list[dict]:
    _, received = receiver
    bodies = [json.loads(body) for _, body in received]
    return [m for m in bodies if str(m.get("event", "")).startswith("capacity")]


def _scan(endpoint: Endpoint) -> Scan:
    scan = Scan.dangerously_unscoped.create(endpoint=endpoint, trigger=ScanTrigger.MANUAL)
    dispatch.send(scan.pk)
    wait_for(
        lambda: (
            Scan.dangerously_unscoped.get(pk=scan.pk).status in (ScanStatus.SUCCEEDED, ScanStatus.ERRORED)
        ),
        180,
        "the scan to finish",
    )
    scan.refresh_from_db()
    assert scan.status == ScanStatus.SUCCEEDED, scan.error_reason
    return scan


def _gauge(token: str, name: str) -> list[float]:
    answer = APIClient().get("/api/v1/metrics", **bearer(token))
    assert answer.status_code == 200
    return [
        s.value
        for family in text_string_to_metric_families(answer.content.decode())
        for s in family.samples
        if s.name == name
    ]


def test_the_capacity_of_a_six_slot_endpoint_is_shown_trended_gauged_and_alerted_once(
    world, tmp_path, receiver
):
    mail = tmp_path / "mail"
    mail.mkdir()
    worker = workers.start(
        env=worker_env(
            DJANGO_SETTINGS_MODULE="tests.helpers.mail_capture_settings",
            TOKVERA_TEST_MAIL_DIR=str(mail),
        )
    )
    try:
        with running_target(SLOTTED) as (host, port):
            endpoint = make_endpoint(
                world.team,
                base_url=f"http://{host}:{port}/v1",
                model="tokvera-target",
                levels=[1, 4, 16],
                requests_per_level=None,
                timeout_s=10,
                slo_ttft_p95_ms=80.0,
                capacity_search=True,
                capacity_alert_below=THRESHOLD,
                webhook_url=receiver[0],
            )
            first = _scan(endpoint)
            wait_for(lambda: len(_mails(mail)) == 1 and len(_capacity_events(receiver)) == 1, 60,
                     "the capacity alert")
            second = _scan(endpoint)
        assert first.capacity_outcome == second.capacity_outcome == "met"
        for scan in (first, second):
            assert abs(scan.capacity_concurrency - SLOTS) <= 1
            assert scan.report["capacity"]["concurrency"] == scan.capacity_concurrency
            assert scan.capacity_requests_per_s > 0
            assert scan.report["plan"]["slo"] == {"ttft_p95_ms": 80.0, "attainment": 0.95}
            # the search stayed within the site's levels and the plan's grade levels
            assert [lv["concurrency"] for lv in scan.report["levels"]] == [1, 4, 16]
            assert max(scan.report["capacity"]["levels_tried"]) <= 256
        found = first.capacity_concurrency

        # The endpoint page, as the team's owner sees it.
        client = Client()
        client.force_login(world.owner)
        page = client.get(f"/endpoints/{endpoint.public_id}/").content.decode()
        assert f"Serves up to <strong>{second.capacity_concurrency} concurrent streams" in page
        assert 'data-trend="capacity"' in page and 'data-series="capacity"' in page
        assert f"Alert when it drops below {THRESHOLD} streams" in page and "below now" in page

        # The dashboard: beside the grade.
        board = client.get(f"/teams/{world.team.slug}/").content.decode()
        assert f"up to {second.capacity_concurrency} streams within the SLO" in board

        # The trend API.
        answer = APIClient().get(
            f"/api/v1/endpoints/{endpoint.public_id}/capacity", **bearer(world.read_only_token)
        )
        assert answer.status_code == 200
        body = answer.json()
        assert [p["concurrency"] for p in body["points"]] == [
            first.capacity_concurrency,
            second.capacity_concurrency,
        ]
        assert [p["scan_id"] for p in body["points"]] == [str(first.public_id), str(second.public_id)]
        assert body["latest"]["scan"] == str(second.public_id)
        assert body["latest"]["outcome"] == "met"
        # ...and the scans API carries it per scan
        scans = (
            APIClient()
            .get(f"/api/v1/endpoints/{endpoint.public_id}/scans", **bearer(world.read_only_token))
            .json()["results"]
        )
        assert {s["capacity_concurrency"] for s in scans} == {
            first.capacity_concurrency,
            second.capacity_concurrency,
        }

        # The team's gauge; another team sees none of it.
        assert _gauge(world.read_only_token, "tokvera_endpoint_capacity_concurrency") == [
            float(second.capacity_concurrency)
        ]
        assert _gauge(world.other_team_token, "tokvera_endpoint_capacity_concurrency") == []

        # Recovery: the endpoint gets more slots; one more message, no repeat of the first.
        with running_target(ROOMY) as (host, port):
            Endpoint.dangerously_unscoped.filter(pk=endpoint.pk).update(base_url=f"http://{host}:{port}/v1")
            third = _scan(endpoint)
            wait_for(lambda: len(_mails(mail)) >= 2 and len(_capacity_events(receiver)) >= 2, 60,
                     "the recovery alert")
        assert third.capacity_concurrency >= THRESHOLD
    finally:
        stop(worker)

    events = [message["event"] for message in _capacity_events(receiver)]
    assert events == ["capacity_low", "capacity_recovered"]
    low = _capacity_events(receiver)[0]
    assert low["capacity"]["concurrency"] == first.capacity_concurrency
    assert low["scan"]["id"] == str(first.public_id)
    assert f"serves up to {found} concurrent streams" in low["detail"]
    mails = _mails(mail)
    assert len(mails) == 2
    assert "capacity low" in mails[0] and f"capacity dropped below {THRESHOLD} streams" in mails[0]
    assert "capacity recovered" in mails[1]
    endpoint.refresh_from_db()
    assert not endpoint.capacity_low
