"""Down is a state, not a grade, on both compare pages: a down scan shows "down"
with its cause, never the F and the points report.json records; the endpoint-vs-endpoint page
speaks of two endpoints, not of a grade that "held"."""

from __future__ import annotations

import copy
from datetime import timedelta

import pytest
from django.urls import reverse

from scans.grader.report_text import is_down
from scans.history.compare import compare
from tests.helpers.factories import make_endpoint
from tests.scans.conftest import GRADE_A, GRADE_B, NOW, report_for, scan_at

pytestmark = pytest.mark.django_db

CAUSE = "could not connect to 127.0.0.1:9: connection refused (nothing is listening there)"


def down_report() -> dict:
    """A report as the grader writes one for a dead port: the preflight stopped the scan, no
    request succeeded, and the scoring spec's F under no_successful_request."""
    report = copy.deepcopy(report_for(GRADE_A))
    report["preflight"] = {
        "stopped": True,
        "cause": CAUSE,
        "kind": "connect",
        "probe": {"outcome": "connect"},
    }
    for level in report["levels"]:
        level.update(succeeded=0, failed={"connect": level["requests"]})
    report["score"] = {
        **report["score"],
        "grade": "F",
        "points": 12.5,
        "uncapped_grade": "F",
        "caps_applied": [{"id": "no_successful_request", "grade_at_best": "F"}],
    }
    assert is_down(report)
    return report


def test_a_down_side_has_its_cause_and_no_grade_points_or_pillars():
    comparison = compare(report_for(GRADE_A), down_report())

    assert comparison.after_down and not comparison.before_down
    assert comparison.after_cause == CAUSE
    assert comparison.grade_moved == "none" and comparison.points_delta is None
    assert comparison.reasons[0].startswith("Down is a state, not a grade")
    assert f"This scan was down: {CAUSE}." in comparison.reasons
    assert not any("points" in r and "12.5" in r for r in comparison.reasons)
    assert not any("F" in r.split() for r in comparison.reasons)


def test_the_scan_compare_page_shows_down_with_its_cause_never_its_f(owner_client, endpoint):
    scan_at(endpoint, NOW - timedelta(hours=2), GRADE_A)
    down = scan_at(endpoint, NOW - timedelta(hours=1))
    type(down).dangerously_unscoped.filter(pk=down.pk).update(
        report=down_report(), down=True, grade="", points=None
    )

    body = owner_client.get(reverse("scan-compare", args=[down.public_id])).content.decode()

    summary = body[body.index('class="card compare-summary"') : body.index("</section>")]
    assert 'data-grade="down"' in summary and CAUSE in summary
    assert 'data-grade="F"' not in summary and "12.5 points" not in summary
    assert "No grade to compare" in summary and "Why the grade" not in summary
    assert "<h2>Pillars</h2>" not in body
    assert "· down</option>" not in body  # the chooser lists the other scan, an A
    earlier = owner_client.get(
        reverse("scan-compare", args=[down.public_id]) + "?with=" + str(down.public_id)
    ).status_code
    assert earlier == 200


def test_the_endpoint_compare_page_speaks_of_two_endpoints(world, owner_client):
    left = make_endpoint(world.team, name="left box")
    right = make_endpoint(world.team, name="right box")
    scan_at(left, NOW - timedelta(hours=1), GRADE_A)
    scan_at(right, NOW - timedelta(hours=1), GRADE_A)
    url = reverse("endpoints-compare", args=[world.team.slug])

    body = owner_client.get(f"{url}?a={left.public_id}&b={right.public_id}").content.decode()
    assert "How the two grades compare" in body and "Why the grade held" not in body
    assert "Both grade A." in body

    scan_at(right, NOW - timedelta(minutes=30), GRADE_B)
    body = owner_client.get(f"{url}?a={left.public_id}&b={right.public_id}").content.decode()
    assert "left box grades A, right box B." in body and "went from" not in body

    dead = make_endpoint(world.team, name="dead box")
    gone = scan_at(dead, NOW - timedelta(minutes=10))
    type(gone).dangerously_unscoped.filter(pk=gone.pk).update(
        report=down_report(), down=True, grade="", points=None
    )
    body = owner_client.get(f"{url}?a={left.public_id}&b={dead.public_id}").content.decode()
    assert f"dead box is down in its latest scan: {CAUSE}." in body
    assert 'data-grade="down"' in body and "12.5" not in body
