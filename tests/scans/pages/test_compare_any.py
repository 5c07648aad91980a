"""Compare any two scans of an endpoint (not only neighbours), and two endpoints side by side;
a value that moved by 25 % or more is flagged even when its status held."""

from __future__ import annotations

from datetime import timedelta

import pytest

from scans.grader.scoring import CheckValue
from scans.history.compare import compare
from tests.helpers.factories import make_endpoint
from tests.scans.conftest import GRADE_A, NOW, report_for, scan_at, with_values

pytestmark = pytest.mark.django_db

SLOWER = with_values(GRADE_A, ttft_p95_at_concurrency_1=CheckValue(453.0))


def test_a_ttft_rise_from_201_to_453_ms_is_flagged_though_both_pass():
    before = report_for(with_values(GRADE_A, ttft_p95_at_concurrency_1=CheckValue(201.0)))
    after = report_for(SLOWER)

    comparison = compare(before, after)

    ttft = next(c for c in comparison.checks if c.id == "ttft_p95_at_concurrency_1")
    assert ttft.before_status == ttft.after_status == "pass"
    assert ttft.relative_change == pytest.approx(252 / 201)  # +125 %
    assert ttft.flagged
    assert [c.id for c in comparison.checks if c.flagged] == ["ttft_p95_at_concurrency_1"]


def test_a_change_under_a_quarter_is_not_flagged():
    before = report_for(with_values(GRADE_A, ttft_p95_at_concurrency_1=CheckValue(200.0)))
    after = report_for(with_values(GRADE_A, ttft_p95_at_concurrency_1=CheckValue(249.0)))

    assert not compare(before, after).flagged


def test_two_scans_that_are_not_neighbours_compare_on_the_page(world, owner_client):
    endpoint = make_endpoint(world.team)
    first = scan_at(endpoint, NOW - timedelta(hours=3),
                    with_values(GRADE_A, ttft_p95_at_concurrency_1=CheckValue(201.0)))
    scan_at(endpoint, NOW - timedelta(hours=2), GRADE_A)
    last = scan_at(endpoint, NOW - timedelta(hours=1), SLOWER)

    body = owner_client.get(f"/scans/{last.public_id}/compare?with={first.public_id}").content.decode()

    assert f'data-before="{first.public_id}"' in body and f'data-after="{last.public_id}"' in body
    assert 'data-flag="ttft_p95_at_concurrency_1"' in body
    assert "+125 %" in body and "still pass" in body


def test_a_scan_of_another_endpoint_cannot_be_compared_with(world, owner_client):
    one, other = make_endpoint(world.team, name="one"), make_endpoint(world.team, name="other")
    mine = scan_at(one, NOW, GRADE_A)
    theirs = scan_at(other, NOW, GRADE_A)

    response = owner_client.get(f"/scans/{mine.public_id}/compare?with={theirs.public_id}")

    assert response.status_code == 404


def test_two_endpoints_side_by_side_compare_their_latest_scans(world, owner_client):
    fast = make_endpoint(world.team, name="fast box")
    slow = make_endpoint(world.team, name="slow box")
    scan_at(fast, NOW - timedelta(hours=5), SLOWER)  # older: not the latest
    scan_at(fast, NOW - timedelta(hours=1),
            with_values(GRADE_A, ttft_p95_at_concurrency_1=CheckValue(201.0)))
    scan_at(slow, NOW - timedelta(hours=1), SLOWER)

    body = owner_client.get(f"/teams/{world.team.slug}/compare",
                            {"a": fast.public_id, "b": slow.public_id}).content.decode()

    assert "Two endpoints side by side" in body
    assert 'data-flag="ttft_p95_at_concurrency_1"' in body and "+125 %" in body
