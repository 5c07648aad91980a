"""A new endpoint with every default, on the run command's demo target, grades like the seeded
demo endpoint and stays green: A by the default profile, above the default floor with a
letter to spare, its SLO meeting the default objective, and no alert from its scans or its
liveness probes."""

from __future__ import annotations

import pytest
from django.urls import reverse

from scans.endpoints import service as endpoints
from scans.grader.demo_server import DEMO_TARGET, running_target
from scans.history import slo_windows, state
from scans.liveness import worker as probe_worker
from scans.models import AlertEvent, Endpoint, Scan, ScanStatus
from scans.pages.forms import EndpointForm
from scans.running import worker as scan_worker

pytestmark = pytest.mark.django_db(transaction=True)

#: What a form with every default says, besides the fields a person must type.
TYPED = {"name", "base_url", "model"}
#: Fields that say nothing about how a scan runs or is judged.
NOT_PROFILE = {"name", "base_url", "interval_minutes"}


def _form_defaults(team) -> dict:
    """The create form as a browser submits it untouched: each field's initial value."""
    form = EndpointForm(team=team)
    data = {}
    for name in form.fields:
        value = form[name].value()
        if name in TYPED or value in (None, "", False, []):
            continue
        data[name] = "on" if value is True else value
    return data


def _judged_fields() -> list[str]:
    """Every field of the scan profile, the SLO and the alerting that has a form default."""
    fields = [*endpoints.PROFILE_FIELDS, "slo_grade_floor", "slo_objective", "confirm_after",
              "probe_interval_s", "alert_after_errors", "renotify_minutes",
              "capacity_search"]
    return [name for name in fields if name not in NOT_PROFILE]


def _scan(endpoint: Endpoint) -> Scan:
    scan = scan_worker.claim(Scan.dangerously_unscoped.create(endpoint=endpoint,
                                                              trigger="schedule").pk)
    assert scan_worker.execute(scan) == "succeeded"
    scan.refresh_from_db()
    return scan


def test_a_new_endpoint_with_every_default_grades_a_on_the_demo_target_and_sends_nothing(
        world, owner_client, settings):
    settings.OUTBOUND_ALLOW = ["loopback"]
    with running_target(DEMO_TARGET) as (host, port):
        url = f"http://{host}:{port}/v1"
        settings.DEMO_TARGET_URL = url
        answer = owner_client.post(reverse("endpoint-create", args=[world.team.slug]), {
            **_form_defaults(world.team), "name": "mine", "base_url": url,
            "model": "tokvera-target"})
        assert answer.status_code == 302, answer.content.decode()[:2000]
        mine = Endpoint.dangerously_unscoped.get(team=world.team, name="mine")
        # The demo endpoint (seeded, or added in one click) is the same endpoint but for its
        # interval: what it shows is what a new endpoint of that server gets.
        demo = Endpoint(team=world.team, **endpoints.demo_endpoint_fields(url))
        for name in _judged_fields():
            assert getattr(mine, name) == getattr(demo, name), name

        scans = [_scan(mine) for _ in range(2)]  # the floor alert needs two in a row
        for _ in range(3):
            probe_worker.probe_batch([mine.pk], "site")

    for scan in scans:
        assert scan.status == ScanStatus.SUCCEEDED and not scan.down
        assert scan.grade == "A", scan.report["score"]
        # The floor (B begins at 80 points) is a letter below, not at the edge of, the grade.
        assert scan.points >= 90
    mine.refresh_from_db()
    assert state.current(mine).state == state.UP
    assert mine.liveness == "up"
    week = slo_windows.window(mine, 7)
    assert week.status not in {slo_windows.BREACHING, slo_windows.AT_RISK}
    assert week.bad_s == 0
    assert not AlertEvent.dangerously_unscoped.filter(endpoint=mine).exists()


def test_every_field_with_a_default_says_beside_it_what_the_default_does(world):
    form = EndpointForm(team=world.team)
    unexplained = [name for name, field in form.fields.items()
                   if name not in TYPED and not name.startswith("clear_") and not field.help_text]
    assert unexplained == []
