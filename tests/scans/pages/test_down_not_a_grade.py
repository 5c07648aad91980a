"""Down is a state, not a grade, on the site: a real scan of a closed loopback port
is stored down (no letter, no points) and shown as down with no grade on the dashboard, the
endpoint page, the scan page, the badge, the API and Prometheus, a gap on the grade line, and
still a miss in the SLO windows; a server whose /models does not list the model asked for
makes the endpoint degraded with the report's words as the cause."""

from __future__ import annotations

import importlib
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from scans.grader.demo_server import TargetConfig, running_target
from scans.history import slo_windows, state
from scans.history.grades import grade_history
from scans.models import CheckResult, Scan, ScanTrigger
from scans.running import worker as scan_worker
from tests.conftest import bearer, free_port
from tests.helpers.factories import make_endpoint
from tests.scans.conftest import GRADE_A, NOW, scan_at

pytestmark = pytest.mark.django_db


def _scan_for_real(endpoint) -> Scan:
    """The worker's own path: claim, run the grader against the endpoint's URL, store."""
    scan = scan_worker.claim(
        Scan.dangerously_unscoped.create(endpoint=endpoint, trigger=ScanTrigger.MANUAL).pk)
    assert scan_worker.execute(scan) == "succeeded"
    scan.refresh_from_db()
    return scan


def _moved_to(scan: Scan, when) -> Scan:
    Scan.dangerously_unscoped.filter(pk=scan.pk).update(
        queued_at=when, started_at=when, finished_at=when + timedelta(minutes=1))
    CheckResult.dangerously_unscoped.filter(scan_id=scan.pk).update(
        measured_at=when + timedelta(minutes=1))
    scan.refresh_from_db()
    return scan


def _dead(world, settings, name="dead box", **fields):
    settings.OUTBOUND_ALLOW = ["loopback"]
    return make_endpoint(world.team, name=name, levels=[1], requests_per_level=2,
                         base_url=f"http://127.0.0.1:{free_port()}/v1", **fields)


def _row(page: str, endpoint) -> str:
    start = page.index(f'<tr data-endpoint="{endpoint.public_id}"')
    return page[start:page.index("</tr>", start)]


def _samples(text: str) -> dict[tuple[str, str], float]:
    return {(s.name, s.labels["endpoint"]): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_a_dead_port_is_stored_down_and_report_json_keeps_its_f(world, settings):
    scan = _scan_for_real(_dead(world, settings))

    assert scan.down and scan.grade == "" and scan.points is None and scan.uncapped_grade == ""
    assert scan.report["preflight"]["stopped"] is True
    assert scan.report["score"]["grade"] == "F"  # the scoring spec's no_successful_request


def test_a_dead_endpoint_is_down_with_no_grade_on_the_pages(world, settings, owner_client):
    dead = _dead(world, settings)
    scan_at(dead, timezone.now() - timedelta(hours=3), GRADE_A)  # graded before it died
    scan = _scan_for_real(dead)

    row = _row(owner_client.get(f"/teams/{world.team.slug}/").content.decode(), dead)
    assert 'data-state="down"' in row and "connection refused" in row
    latest_cell = row[row.index('<td class="latest">'):]
    latest_cell = latest_cell[:latest_cell.index("</td>")]
    assert 'data-grade="down"' in latest_cell and "no grade" in latest_cell
    assert 'data-grade="F"' not in row and "F (provisional)" not in row

    detail = owner_client.get(f"/endpoints/{dead.public_id}/").content.decode()
    assert "Latest scan" in detail and 'data-grade="down"' in detail
    assert 'data-grade="F"' not in detail
    assert 'data-grade="A"' in detail  # the earlier graded scan keeps its letter
    assert "from the latest scan, which is down: nothing answered" in detail

    page = owner_client.get(f"/scans/{scan.public_id}/").content.decode()
    lead = page[page.index('data-state="down"'):page.index("<dl")]
    assert "connection refused" in lead and "Down since" in lead
    assert 'data-grade="down"' in page and 'data-grade="F"' not in page
    assert "srcdoc=" in page  # the report, with the preflight's evidence, is still shown
    status = owner_client.get(f"/scans/{scan.public_id}/status.json").json()
    assert status["down"] is True and status["grade"] is None and status["points"] is None


def test_the_badge_of_a_dead_endpoint_says_down_not_f(world, settings, client):
    dead = _dead(world, settings)
    _scan_for_real(dead)

    svg = client.get(f"/badge/{dead.badge_key}.svg")
    text = svg.content.decode()
    assert ">down<" in text and "F (provisional)" not in text and ">F" not in text
    assert svg["Cache-Control"] == "public, max-age=300"
    shield = client.get(f"/badge/{dead.badge_key}.json")
    assert shield.json()["message"] == "down"
    assert shield["Cache-Control"] == "public, max-age=300"


def test_the_api_gives_a_down_scan_no_grade_and_no_points_and_the_state(world, settings, api):
    dead = _dead(world, settings)
    scan = _scan_for_real(dead)
    token = bearer(world.read_only_token)

    one = api.get(f"/api/v1/scans/{scan.public_id}/", **token).json()
    assert (one["grade"], one["points"], one["down"]) == (None, None, True)
    endpoint = api.get(f"/api/v1/endpoints/{dead.public_id}/", **token).json()
    assert endpoint["state"]["state"] == "down"
    assert "connection refused" in endpoint["state"]["cause"]
    latest = endpoint["latest_scan"]
    assert (latest["grade"], latest["points"], latest["down"]) == (None, None, True)
    listed = {e["id"]: e for e in api.get("/api/v1/endpoints/", **token).json()["results"]}
    assert listed[str(dead.public_id)]["latest_scan"]["grade"] is None
    assert api.get(f"/api/v1/scans/{scan.public_id}/report.json",
                   **token).json()["score"]["grade"] == "F"


def test_prometheus_has_state_3_and_no_grade_sample_for_a_down_scan(world, settings, api):
    never_graded = _dead(world, settings, name="never graded")
    _scan_for_real(never_graded)
    was_up = _dead(world, settings, name="was up")
    scan_at(was_up, timezone.now() - timedelta(hours=2), GRADE_A)
    _scan_for_real(was_up)

    got = _samples(api.get("/api/v1/metrics", **bearer(world.read_only_token)).content.decode())

    assert got[("tokvera_endpoint_state", "never graded")] == 3
    assert ("tokvera_endpoint_grade", "never graded") not in got
    assert ("tokvera_endpoint_points", "never graded") not in got
    assert got[("tokvera_endpoint_state", "was up")] == 3
    # the grade gauges read the latest scan that was graded, not the down one
    assert got[("tokvera_endpoint_grade", "was up")] == 5
    assert got[("tokvera_endpoint_points", "was up")] == 100.0


def test_a_down_scan_is_a_gap_on_the_grade_line_and_a_miss_in_the_slo_window(world, settings):
    dead = _dead(world, settings, slo_grade_floor="B", slo_objective=0.99, interval_minutes=60)
    start = NOW - timedelta(days=7)
    for i in range(168):
        if i == 100:
            _moved_to(_scan_for_real(dead), start + i * timedelta(hours=1))
        else:
            scan_at(dead, start + i * timedelta(hours=1), GRADE_A)

    window = slo_windows.window(dead, 7, now=NOW)
    assert window.bad_s == 3600  # the down hour is down time
    assert window.scans == 168

    points = grade_history(dead, since=start, until=NOW, max_points=500)
    down = [p for p in points if p.down]
    assert len(down) == 1 and down[0].points is None and not down[0].has_letter
    from scans.pages import charts
    chart = str(charts.grade_chart(points, start, NOW))
    assert "no-letter down" in chart and "down (the endpoint did not answer)" in chart
    bucketed = grade_history(dead, since=start, until=NOW, max_points=20)
    assert sum(p.down for p in bucketed) == 1


def test_a_model_the_server_does_not_list_makes_the_endpoint_degraded(
        world, settings, owner_client, api):
    settings.OUTBOUND_ALLOW = ["loopback"]
    with running_target(TargetConfig(ttft_ms=5, itl_ms=1, tokens=8)) as (host, port):
        endpoint = make_endpoint(world.team, name="wrong model", model="tiny",
                                 base_url=f"http://{host}:{port}/v1", levels=[1],
                                 requests_per_level=3)
        scan = _scan_for_real(endpoint)
    (warning,) = scan.report["preflight"]["warnings"]
    assert warning["kind"] == "model_not_listed" and not scan.down
    assert scan.report["preflight"]["models"]["model_listed"] is False

    current = state.current(endpoint)
    assert current.state == "degraded"
    assert current.cause.startswith(
        "the server does not list model 'tiny' (it lists: tokvera-target); the grade is of "
        "whatever answered")

    row = _row(owner_client.get(f"/teams/{world.team.slug}/").content.decode(), endpoint)
    assert 'data-state="degraded"' in row and "does not list model &#x27;tiny&#x27;" in row
    body = api.get(f"/api/v1/endpoints/{endpoint.public_id}/",
                   **bearer(world.read_only_token)).json()
    assert body["state"]["state"] == "degraded"
    assert body["state"]["cause"] == current.cause
    got = _samples(api.get("/api/v1/metrics", **bearer(world.read_only_token)).content.decode())
    assert got[("tokvera_endpoint_state", "wrong model")] == 1


def test_a_listed_model_or_an_old_report_without_the_field_changes_nothing(world):
    listed = make_endpoint(world.team, name="listed")
    report = scan_at(listed, NOW, GRADE_A).report
    assert "preflight" not in report  # an old report
    assert state.current(listed).state == "up"
    fine = make_endpoint(world.team, name="fine")
    scan = scan_at(fine, NOW, GRADE_A)
    Scan.dangerously_unscoped.filter(pk=scan.pk).update(report={
        **scan.report, "preflight": {"stopped": False, "warnings": [],
                                     "models": {"answered": True, "model_listed": True}}})
    assert state.current(fine).state == "up"


def test_the_migration_marks_existing_down_rows_and_leaves_graded_ones(world, settings):
    dead = _dead(world, settings)
    old_down = _scan_for_real(dead)
    # as stored before issue 23: the report's F denormalized onto the row
    Scan.dangerously_unscoped.filter(pk=old_down.pk).update(down=False, grade="F", points=0,
                                                             uncapped_grade="F")
    graded = scan_at(make_endpoint(world.team, name="fine"), NOW, GRADE_A)
    migration = importlib.import_module("scans.migrations.0012_scan_down")

    with connection.cursor() as cursor:
        cursor.execute(migration.MARK_DOWN)

    old_down.refresh_from_db()
    graded.refresh_from_db()
    assert old_down.down and old_down.grade == "" and old_down.points is None
    assert not graded.down and graded.grade == "A"
