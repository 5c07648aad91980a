"""The endpoint page: grade history, per-check trends, SLO windows, scans, "scan now" and the
badge URLs."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from scans.grader.demo_server import TargetConfig, running_target
from scans.models import Endpoint, Scan
from tests.helpers.factories import make_endpoint
from tests.scans.conftest import CAPPED_C, GRADE_A, GRADE_B, NO_LETTER, scan_at

pytestmark = pytest.mark.django_db


def page(client, endpoint, query: str = "") -> str:
    response = client.get(reverse("endpoint-detail", args=[endpoint.public_id]) + query)
    assert response.status_code == 200
    return response.content.decode()


def svg_attr(body: str, chart: str, attr: str, check: str | None = None) -> str:
    tags = [tag for tag in re.findall(r"<svg[^>]*>", body)
            if f'data-chart="{chart}"' in tag and (check is None or f'data-check="{check}"' in tag)]
    assert len(tags) == 1, f"one {chart} chart {check or ''}"
    return re.search(rf' {attr}="([^"]*)"', tags[0])[1]


def test_a_new_endpoint_says_what_is_missing_everywhere(world, owner_client, endpoint):
    body = page(owner_client, endpoint)

    # One empty state for the charts and SLO windows, not one per section.
    assert 'data-first-scan="none"' in body and "no scan yet in the last" not in body
    assert 'data-chart="grades"' not in body
    assert 'id="slo"' not in body and 'id="scans"' not in body
    assert '<p class="empty">no scan yet</p>' not in body
    assert "0%" not in body  # no made-up shares


def test_the_history_and_trend_charts_carry_the_scans(world, owner_client, endpoint):
    now = timezone.now()
    for hours, values in ((5, GRADE_A), (4, CAPPED_C), (3, NO_LETTER), (2, GRADE_B)):
        scan_at(endpoint, now - timedelta(hours=hours), values)

    body = page(owner_client, endpoint)

    assert svg_attr(body, "grades", "data-count") == "4"
    assert svg_attr(body, "grades", "data-capped") == "1"
    assert svg_attr(body, "grades", "data-breaks") == "0"
    for check_id in ("ttft_p95_at_concurrency_1", "error_rate", "ttft_p99_load_ratio",
                     "generation_rate_load_ratio"):
        assert svg_attr(body, "check", "data-count", check_id) == "4"
    assert "version-note" not in body


def test_a_change_of_scoring_version_is_drawn_as_a_break_and_said(world, owner_client, endpoint):
    now = timezone.now()
    scan_at(endpoint, now - timedelta(hours=3), GRADE_A, version="0.9.0")
    scan_at(endpoint, now - timedelta(hours=2), GRADE_A)  # graded under 1.0.0

    body = page(owner_client, endpoint)

    assert svg_attr(body, "grades", "data-breaks") == "1"
    assert svg_attr(body, "grades", "data-versions") == "0.9.0 1.0.0"
    assert "scoring versions 0.9.0 and 1.0.0" in body and "not comparable" in body


def test_the_range_picks_what_the_charts_show(world, owner_client, endpoint):
    now = timezone.now()
    scan_at(endpoint, now - timedelta(days=20), GRADE_A)
    scan_at(endpoint, now - timedelta(hours=2), GRADE_B)

    assert svg_attr(page(owner_client, endpoint, "?range=7d"), "grades", "data-count") == "1"
    assert svg_attr(page(owner_client, endpoint, "?range=30d"), "grades", "data-count") == "2"
    assert svg_attr(page(owner_client, endpoint, "?range=bogus"), "grades", "data-count") == "2"


def test_the_slo_windows_show_shares_budget_and_leave_errored_scans_out(world, owner_client):
    endpoint = make_endpoint(world.team, slo_grade_floor="B", slo_ttft_p95_ms=800,
                             slo_objective=0.8)
    now = timezone.now()
    for hours, values in ((9, GRADE_A), (8, GRADE_A), (7, GRADE_B), (6, CAPPED_C),
                          (5, GRADE_A)):
        scan_at(endpoint, now - timedelta(hours=hours), values)
    scan_at(endpoint, now - timedelta(hours=4), status="errored")

    body = page(owner_client, endpoint)
    seven = re.search(r'<div class="window" data-days="7"[^>]*>(.*?)</div>\s*\n', body, re.S)[1]

    # hourly scans; the last one's time ends at the errored scan: 5 h covered, 1 h of it bad
    assert "80% over 7 days allows 1 d 9 h of bad time" in seven
    assert "1 h used, 1 d 8 h left" in seven
    assert 'data-slo="meeting"' in seven  # 80.0 % of the covered time good: the objective
    assert "Scans cover 5 h of 7 d (3.0%)" in seven
    assert "grade B or better</td><td>80.0%</td><td>1 h</td>" in seven
    assert "TTFT p95 at concurrency 1 at most 800 ms</td><td>80.0%</td><td>1 h</td>" in seven
    assert "1 errored scan left out" in seven
    assert "scoring 1.0.0" in seven


def test_the_scan_list_shows_errored_scans_with_their_reason(world, owner_client, endpoint):
    scan_at(endpoint, timezone.now() - timedelta(hours=1), status="errored",
            error_reason="refused to connect to 10.0.0.7: a private address")

    body = page(owner_client, endpoint)

    assert 'data-status="errored"' in body
    assert "refused to connect to 10.0.0.7" in body


def test_scan_now_queues_a_manual_scan_and_a_worker_runs_it(
        world, owner_client, settings, eager_tasks):
    settings.OUTBOUND_ALLOW = ["loopback"]
    with running_target(TargetConfig(ttft_ms=5, itl_ms=1, tokens=4)) as (host, port):
        endpoint = make_endpoint(world.team, base_url=f"http://{host}:{port}/v1", levels=[1],
                                 requests_per_level=2)
        response = owner_client.post(reverse("endpoint-scan-now", args=[endpoint.public_id]))

    scan = Scan.dangerously_unscoped.get(endpoint=endpoint)
    assert scan.trigger == "manual"
    assert scan.status == "succeeded", scan.error_reason  # the task ran (in-process here)
    assert response["Location"] == reverse("scan-detail", args=[scan.public_id])


def test_scan_now_too_soon_is_refused_with_the_wait(world, owner_client, endpoint):
    Endpoint.dangerously_unscoped.filter(pk=endpoint.pk).update(
        last_manual_scan_at=timezone.now())

    response = owner_client.post(reverse("endpoint-scan-now", args=[endpoint.public_id]),
                                 follow=True)

    body = response.content.decode()
    assert re.search(r"try again in \d+ s", body)
    assert not Scan.dangerously_unscoped.filter(endpoint=endpoint).exists()


def test_scan_now_on_a_pushed_endpoint_explains_why_not(world, owner_client):
    endpoint = make_endpoint(world.team, mode="pushed")

    body = owner_client.post(reverse("endpoint-scan-now", args=[endpoint.public_id]),
                             follow=True).content.decode()

    assert "This endpoint is pushed" in body
    assert not Scan.dangerously_unscoped.filter(endpoint=endpoint).exists()
    assert 'data-action="scan-now"' not in body


def test_a_viewer_sees_the_page_without_write_buttons(world, viewer_client, endpoint):
    body = page(viewer_client, endpoint)

    assert 'data-action="scan-now"' not in body
    assert reverse("endpoint-edit", args=[endpoint.public_id]) not in body
    assert 'data-action="rotate-badge"' not in body
    assert f"/badge/{endpoint.badge_key}.svg" in body


def test_members_see_the_badge_urls_but_only_managers_can_rotate(world, endpoint):
    from django.test import Client

    member = Client()
    member.force_login(world.member)
    owner = Client()
    owner.force_login(world.owner)

    assert 'data-action="rotate-badge"' not in page(member, endpoint)
    body = page(owner, endpoint)
    assert 'data-action="rotate-badge"' in body
    assert f"/badge/{endpoint.badge_key}.json" in body
