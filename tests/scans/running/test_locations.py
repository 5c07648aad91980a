"""Scan locations and the dispatch rules, in-process against the real database (delivery through
real workers and queues: test_scale_out.py). An endpoint's locations are checked against
SCAN_LOCATIONS; each location gets its own scan per slot; a worker of one location refuses
another's scan; the beat sends one waiting scan per free origin and keeps a busy origin's
backlog alive."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from accounts.models import TokenScope
from accounts.teams import issue_token
from scans.models import Endpoint, OriginLock, Scan, ScanStatus
from scans.running import dispatch
from scans.running import worker as scan_worker
from tests.conftest import bearer
from tests.helpers.factories import make_endpoint, make_report

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _three_locations(settings):
    settings.SCAN_LOCATIONS = ["site", "eu", "us-east"]
    settings.SCAN_DEFAULT_LOCATION = "site"


def _due(world, name: str, base_url: str = "http://127.0.0.1:9/v1", **fields) -> Endpoint:
    return make_endpoint(world.team, name=name, base_url=base_url,
                         next_scan_at=timezone.now() - timedelta(seconds=1), **fields)


def test_the_api_refuses_an_unknown_location_and_saves_nothing(world, api):
    _, token = issue_token(world.team, TokenScope.READ_WRITE)
    answer = api.post("/api/v1/endpoints/", {
        "name": "x", "base_url": "https://example.test/v1", "model": "m",
        "locations": ["eu", "mars"]}, format="json", **bearer(token))
    assert answer.status_code == 422  # the site's settings, not the schema, say which
    assert "unknown location 'mars'" in str(answer.json()["locations"])
    assert "site, eu, us-east" in str(answer.json()["locations"])
    assert not Endpoint.dangerously_unscoped.exists()

    answer = api.post("/api/v1/endpoints/", {
        "name": "x", "base_url": "https://example.test/v1", "model": "m",
        "locations": ["us-east", "eu", "eu"]}, format="json", **bearer(token))
    assert answer.status_code == 201, answer.content
    assert answer.json()["locations"] == ["us-east", "eu"]
    assert answer.json()["next_scan_at"] is not None  # the scheduling service set it


def test_each_location_gets_its_own_scan_per_slot_and_a_second_beat_adds_none(world):
    both = _due(world, "both", locations=["eu", "us-east"])
    default = _due(world, "default", base_url="http://127.0.0.1:10/v1")
    first = dispatch.enqueue_due()
    assert dispatch.enqueue_due() == []
    scans = Scan.dangerously_unscoped.filter(pk__in=first)
    assert sorted((s.endpoint_id, s.location) for s in scans) == sorted(
        [(both.pk, "eu"), (both.pk, "us-east"), (default.pk, "site")])
    assert {s.origin for s in scans} == {"http://127.0.0.1:9", "http://127.0.0.1:10"}
    assert len({s.slot for s in scans if s.endpoint_id == both.pk}) == 1


def test_a_worker_of_one_location_does_not_run_another_locations_scan(world):
    _due(world, "eu only", locations=["eu"])
    [scan_id] = dispatch.enqueue_due()
    assert scan_worker.run_queued(scan_id, "site") == "another location's scan"
    scan = Scan.dangerously_unscoped.get(pk=scan_id)
    assert scan.status == ScanStatus.QUEUED and scan.started_at is None
    assert scan_worker.claim(scan_id, location="us-east") is None
    assert not OriginLock.objects.exists()


def test_the_beat_sends_one_scan_per_free_origin_and_keeps_a_busy_origins_backlog_alive(world):
    for i in range(3):
        _due(world, f"shared {i}")  # one origin
    _due(world, "alone", base_url="http://127.0.0.1:10/v1")
    created = dispatch.enqueue_due()
    sent = dispatch.redispatch_due()
    assert len(created) == 4 and len(sent) == 2  # the first of each origin
    assert dispatch.redispatch_due() == []  # sent already: not again until REDISPATCH_AFTER

    # The shared origin is busy for an hour; its other two scans wait past the 30-minute
    # start-by deadline without being reaped as lost, because the beat keeps them alive.
    OriginLock.objects.create(origin="http://127.0.0.1:9", scan_id=sent[0],
                              expires_at=timezone.now() + timedelta(hours=2))
    waiting = list(Scan.dangerously_unscoped.filter(origin="http://127.0.0.1:9")
                   .exclude(pk__in=sent).values_list("pk", flat=True))
    for minutes in (20, 40, 60):
        now = timezone.now() + timedelta(minutes=minutes)
        assert not set(dispatch.redispatch_due(now=now)) & set(waiting)  # its origin is busy
        assert all(deadline > now for deadline in Scan.dangerously_unscoped.filter(
            pk__in=waiting).values_list("deadline_at", flat=True))  # not "lost"


def test_a_pushed_report_is_stored_with_the_pushed_location(world):
    endpoint = make_endpoint(world.team, mode="pushed")
    scan = Scan.dangerously_unscoped.create(endpoint=endpoint, trigger="push")
    stored = scan_worker.store_report(scan, make_report(), pushed=True)
    assert stored.location == "pushed"
