"""The team dashboard: every endpoint with its latest grade, provisional marker, sparkline,
last and next scan and 7-day SLO status; empty states that say what is missing."""

from __future__ import annotations

import re
import zoneinfo
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from scans.models import Scan, ScanStatus, ScanTrigger
from tests.helpers.factories import make_endpoint
from tests.scans.conftest import CAPPED_C, GRADE_A, GRADE_B, scan_at

pytestmark = pytest.mark.django_db


def dashboard(client, world) -> str:
    response = client.get(reverse("team-dashboard", args=[world.team.slug]))
    assert response.status_code == 200
    return response.content.decode()


def row(body: str, endpoint) -> str:
    match = re.search(rf'<tr data-endpoint="{endpoint.public_id}">(.*?)</tr>', body, re.S)
    assert match, "the endpoint has a row"
    return match[1]


def test_a_team_without_endpoints_is_told_so_and_offered_the_form(world, owner_client):
    body = dashboard(owner_client, world)

    assert "No endpoints yet." in body
    assert reverse("endpoint-create", args=[world.team.slug]) in body


def test_a_viewer_is_not_offered_the_form(world, viewer_client):
    make_endpoint(world.team)

    assert reverse("endpoint-create", args=[world.team.slug]) not in dashboard(viewer_client,
                                                                                world)


def test_an_endpoint_never_scanned_has_one_empty_state_saying_when_its_first_scan_is(
    world, owner_client
):
    due = timezone.now() + timedelta(minutes=20)
    endpoint = make_endpoint(world.team, next_scan_at=due)

    cells = row(dashboard(owner_client, world), endpoint)

    # One cell across grade, history, last and next scan and SLO, saying it once.
    assert cells.count("<td") == 3 and 'colspan="5" data-first-scan="due"' in cells
    assert f"First scan at <time datetime=\"{due.isoformat()}\">" in cells
    assert f">{due:%H:%M} UTC</time>" in cells
    assert cells.lower().count("no scan") == 1
    assert "data-grade" not in cells and "<svg" not in cells
    assert "data-slo" not in cells and "no scan covers" not in cells
    # On a phone, where those cells are off screen, the same words ride under the name.
    assert f'data-first-scan-inline>first scan at {due:%H:%M} UTC</div>' in cells


@pytest.mark.parametrize(("status", "says"), [
    (ScanStatus.RUNNING, "First scan running now…"),
    (ScanStatus.QUEUED, "First scan queued, waiting for a worker"),
])
def test_a_first_scan_under_way_is_the_rows_empty_state_and_links_to_it(
    world, owner_client, status, says
):
    endpoint = make_endpoint(world.team, next_scan_at=timezone.now() + timedelta(minutes=5))
    scan = Scan.dangerously_unscoped.create(endpoint=endpoint, trigger=ScanTrigger.MANUAL,
                                            status=status, started_at=timezone.now())

    cells = row(dashboard(owner_client, world), endpoint)

    assert f'data-first-scan="{status}"' in cells and says in cells
    assert reverse("scan-detail", args=[scan.public_id]) in cells
    assert "first scan at" not in cells  # not the next slot's time while one is under way


def test_a_far_off_first_scan_gives_its_date_and_the_viewers_timezone(world, owner_client):
    from accounts.models import Profile

    due = timezone.now() + timedelta(days=2)
    endpoint = make_endpoint(world.team, next_scan_at=due)
    Profile.objects.update_or_create(user=world.owner, defaults={"timezone": "Asia/Tokyo"})

    cells = row(dashboard(owner_client, world), endpoint)

    local = timezone.localtime(due, zoneinfo.ZoneInfo("Asia/Tokyo"))
    assert f">{local:%Y-%m-%d %H:%M} JST</time>" in cells


def test_the_slo_column_names_its_window_and_the_viewer_may_pick_30_days(world, owner_client):
    endpoint = make_endpoint(world.team, slo_grade_floor="B", slo_objective=0.8)
    now = timezone.now()
    # Ten days ago a day of bad scans; this week only good ones: 7 days meet, 30 do not.
    for hours in range(24):
        scan_at(endpoint, now - timedelta(days=10, hours=hours), CAPPED_C)
    for hours in range(1, 6):
        scan_at(endpoint, now - timedelta(hours=hours), GRADE_A)

    week = dashboard(owner_client, world)
    month = owner_client.get(reverse("team-dashboard", args=[world.team.slug]),
                             {"slo": "30", "sort": "name"}).content.decode()

    assert 'SLO, <span aria-current="true" data-slo-days="7">7 days</span>' in week
    assert 'href="?sort=state&amp;slo=30" data-slo-days="30"' in week
    assert 'data-slo="meeting"' in row(week, endpoint)
    assert 'SLO, <span aria-current="true" data-slo-days="30">30 days</span>' in month
    assert 'href="?sort=name" data-slo-days="7">show 7 days</a>' in month
    assert 'data-slo="breaching"' in row(month, endpoint)
    assert "of the 30 days" in row(month, endpoint)
    assert 'href="?sort=grade&amp;slo=30"' in month  # the sorts keep the window picked
    # Anything else is the alerts' window.
    odd = owner_client.get(reverse("team-dashboard", args=[world.team.slug]), {"slo": "9"})
    assert '<span aria-current="true" data-slo-days="7">' in odd.content.decode()


def test_a_scanned_endpoint_shows_its_latest_grade_sparkline_and_slo(world, owner_client):
    endpoint = make_endpoint(world.team, slo_grade_floor="B", slo_objective=0.8,
                             next_scan_at=timezone.now() + timedelta(minutes=30))
    now = timezone.now()
    for hours, values in ((6, GRADE_A), (5, GRADE_B), (4, CAPPED_C), (3, GRADE_A),
                          (2, GRADE_A), (1, GRADE_B)):
        scan_at(endpoint, now - timedelta(hours=hours), values)

    cells = row(dashboard(owner_client, world), endpoint)

    assert re.search(r'<span class="grade grade-B" data-grade="B">B</span>', cells)
    assert "scoring 1.0.0" in cells and "provisional" not in cells  # calibrated
    assert 'data-chart="sparkline"' in cells and 'data-grades="A B C A A B"' in cells
    assert "ago" in cells  # the last scan
    # The C brought the next scan forward to confirm it (below the floor needs two in a row).
    endpoint.refresh_from_db()
    assert endpoint.next_scan_at <= timezone.now()
    assert endpoint.next_scan_at.strftime("%Y-%m-%d %H:%M") in cells
    # six hourly scans, one below the floor: 5 of 6 covered hours good, over the 80 % objective
    assert 'data-slo="meeting"' in cells and ">meeting<" in cells
    assert "83.3% of the covered time good (objective 80.0%)" in cells
    assert "no data for 6 d 18 h of the 7 days" in cells


def test_an_endpoint_below_its_objective_says_so(world, owner_client):
    endpoint = make_endpoint(world.team, slo_grade_floor="A", slo_objective=0.999)
    now = timezone.now()
    for hours in range(1, 6):
        scan_at(endpoint, now - timedelta(hours=hours), GRADE_B)

    cells = row(dashboard(owner_client, world), endpoint)

    # five hours below the floor: none of the covered time was good
    assert 'data-slo="breaching"' in cells and ">breaching<" in cells
    assert "0.0% of the covered time good (objective 99.9%)" in cells


def test_a_pushed_or_paused_endpoint_has_no_next_scan_time(world, owner_client):
    pushed = make_endpoint(world.team, name="pushed one", mode="pushed")
    paused = make_endpoint(world.team, name="paused one", enabled=False)

    body = dashboard(owner_client, world)

    assert "pushed from inside its network" in row(body, pushed)
    assert "paused" in row(body, paused)


def test_an_errored_last_scan_is_marked(world, owner_client):
    endpoint = make_endpoint(world.team)
    scan_at(endpoint, timezone.now() - timedelta(hours=2), GRADE_A)
    scan_at(endpoint, timezone.now() - timedelta(hours=1), status="errored")

    cells = row(dashboard(owner_client, world), endpoint)

    assert "errored" in cells
    assert 'data-grade="A"' in cells  # the grade is still the last graded scan's


def test_the_dashboard_runs_the_same_queries_for_one_endpoint_or_many(world, owner_client):
    def count_queries() -> int:
        with CaptureQueriesContext(connection) as queries:
            dashboard(owner_client, world)
        return len(queries.captured_queries)

    first = make_endpoint(world.team, name="first")
    scan_at(first, timezone.now() - timedelta(hours=1), GRADE_A)
    one = count_queries()
    for i in range(5):
        endpoint = make_endpoint(world.team, name=f"more {i}")
        scan_at(endpoint, timezone.now() - timedelta(hours=1), GRADE_B)

    assert count_queries() == one


def test_another_teams_endpoints_are_not_listed(world, owner_client):
    make_endpoint(world.other_team, name="globex secret endpoint")

    assert "globex secret endpoint" not in dashboard(owner_client, world)


def test_a_team_with_many_endpoints_gets_them_a_page_at_a_time(world, owner_client):
    from scans.models import Endpoint
    from scans.pages.dashboard import DASHBOARD_PAGE_SIZE

    Endpoint.dangerously_unscoped.bulk_create(
        Endpoint(team=world.team, name=f"endpoint {i:03d}", base_url="http://127.0.0.1:9/v1",
                 model="m", levels=[1]) for i in range(DASHBOARD_PAGE_SIZE + 3))

    first = dashboard(owner_client, world)
    second = owner_client.get(reverse("team-dashboard", args=[world.team.slug]) + "?page=2")

    assert first.count("<tr data-endpoint=") == DASHBOARD_PAGE_SIZE
    assert f"endpoints 1–{DASHBOARD_PAGE_SIZE} of {DASHBOARD_PAGE_SIZE + 3}" in first
    assert second.content.decode().count("<tr data-endpoint=") == 3
    assert "endpoint 052" in second.content.decode()
