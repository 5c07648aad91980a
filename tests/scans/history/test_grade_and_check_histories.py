"""scans.history.grades and check_results: grade and check histories, downsampled in SQL, each
point with its version."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from scans.history.check_results import check_history
from scans.history.grades import grade_history, latest_grades
from tests.helpers.factories import make_endpoint
from tests.scans.conftest import CAPPED_C, GRADE_A, GRADE_B, NO_LETTER, NOW, bulk_scans, scan_at

pytestmark = pytest.mark.django_db


def test_a_short_history_has_one_point_per_scan_oldest_first(endpoint):
    scan_at(endpoint, NOW - timedelta(hours=2), GRADE_B)
    scan_at(endpoint, NOW - timedelta(hours=1), GRADE_A)

    points = grade_history(endpoint, NOW - timedelta(days=1), NOW)

    assert [(p.grade, p.points, p.scans) for p in points] == [("B", 85.2, 1), ("A", 100.0, 1)]
    assert all(p.scoring_version == "1.0.0" and not p.provisional for p in points)
    assert points[0].scan_id is not None


def test_a_capped_scan_says_which_cap_bound_it(endpoint):
    scan_at(endpoint, NOW - timedelta(hours=1), CAPPED_C)

    (point,) = grade_history(endpoint, NOW - timedelta(days=1), NOW)

    assert (point.grade, point.uncapped_grade, point.capped) == ("C", "B", 1)
    assert point.caps == ("ttft_at_concurrency_1_failed",)


def test_a_scan_with_no_letter_has_no_points(endpoint):
    scan_at(endpoint, NOW - timedelta(hours=1), NO_LETTER)

    (point,) = grade_history(endpoint, NOW - timedelta(days=1), NOW)

    assert point.grade == "insufficient_evidence"
    assert point.points is None and point.no_letter == 1 and not point.has_letter


def test_errored_and_running_scans_are_not_part_of_the_history(endpoint):
    scan_at(endpoint, NOW - timedelta(hours=3), status="errored")
    scan_at(endpoint, NOW - timedelta(hours=2), status="running")
    scan_at(endpoint, NOW - timedelta(hours=1), GRADE_A)

    assert [p.grade for p in grade_history(endpoint, NOW - timedelta(days=1), NOW)] == ["A"]


def test_ninety_days_of_hourly_scans_come_back_as_at_most_max_points_buckets(endpoint):
    start = NOW - timedelta(days=90)
    bulk_scans(endpoint, start, 90 * 24, timedelta(hours=1), grades=("A", "B", "C"))

    points = grade_history(endpoint, start, NOW, max_points=100)

    assert 90 <= len(points) <= 100
    assert sum(p.scans for p in points) == 90 * 24
    assert [p.at for p in points] == sorted(p.at for p in points)
    # Each bucket of a cycle A, B, C…: the mean of its points, its worst grade, min and max.
    full = points[1]
    assert full.grade == "C" and full.points_min == 75.0 and full.points_max == 95.0
    assert 75.0 <= full.points <= 95.0
    assert full.scan_id is None and full.caps == ()


def test_downsampling_happens_in_the_database_not_in_python(endpoint):
    start = NOW - timedelta(days=30)
    bulk_scans(endpoint, start, 30 * 24, timedelta(hours=1))

    with CaptureQueriesContext(connection) as queries:
        points = grade_history(endpoint, start, NOW, max_points=50)

    grouped = [q["sql"] for q in queries.captured_queries if "GROUP BY" in q["sql"]]
    assert grouped, "the buckets are grouped by the database"
    assert len(points) <= 50


def test_buckets_are_equal_slices_of_the_range(endpoint):
    start = NOW - timedelta(days=10)
    # 10 days of hourly scans into 10 buckets: one per day, 24 scans each.
    bulk_scans(endpoint, start, 240, timedelta(hours=1))

    points = grade_history(endpoint, start, start + timedelta(hours=239), max_points=10)

    assert [p.scans for p in points] == [24] * 10
    assert [p.at for p in points] == [start + timedelta(days=d) for d in range(10)]
    assert points[0].last_at == start + timedelta(hours=23)


def test_a_bucket_never_mixes_scoring_versions(endpoint):
    start = NOW - timedelta(days=4)
    bulk_scans(endpoint, start, 50, timedelta(hours=1), version="0.9.0", grades=("A",))
    bulk_scans(endpoint, start + timedelta(hours=50), 46, timedelta(hours=1), version="1.0.0",
               grades=("C",))

    points = grade_history(endpoint, start, start + timedelta(hours=95), max_points=10)

    assert len(points) <= 10
    assert sum(p.scans for p in points) == 96
    for point in points:
        assert point.grade == ("A" if point.scoring_version == "0.9.0" else "C")
    assert not points[-1].provisional and points[0].provisional
    versions = [p.scoring_version for p in points]
    assert versions == sorted(versions)  # one change, in time order


def test_check_history_reads_one_check_with_its_version(endpoint):
    scan_at(endpoint, NOW - timedelta(hours=2), GRADE_A)
    scan_at(endpoint, NOW - timedelta(hours=1), CAPPED_C)

    points = check_history(endpoint, "ttft_p95_at_concurrency_1",
                                   NOW - timedelta(days=1), NOW)

    assert [(p.value, p.status, p.scoring_version) for p in points] == [
        (210.0, "pass", "1.0.0"), (2500.0, "fail", "1.0.0")]
    assert points[1].as_dict()["failed"] == 1


def test_check_history_downsamples_with_min_mean_and_max(endpoint):
    start = NOW - timedelta(days=60)
    bulk_scans(endpoint, start, 60 * 24, timedelta(hours=1),
               check_values={"error_rate": 0.02, "ttft_p95_at_concurrency_1": 300.0})

    points = check_history(endpoint, "error_rate", start, NOW, max_points=60)

    assert len(points) <= 60
    assert sum(p.scans for p in points) == 60 * 24
    assert all(p.value == pytest.approx(0.02) for p in points)
    assert {(p.value_min, p.value_max) for p in points} == {(0.02, 0.02)}
    assert all(p.status == "pass" and p.passed == p.scans for p in points)


def test_check_history_refuses_an_unknown_check(endpoint):
    with pytest.raises(ValueError, match="unknown check"):
        check_history(endpoint, "ttft_p50", NOW - timedelta(days=1), NOW)


def test_check_history_without_since_starts_at_the_first_value(endpoint):
    scan_at(endpoint, NOW - timedelta(days=200), GRADE_A)
    scan_at(endpoint, NOW - timedelta(days=1), GRADE_A)

    assert len(check_history(endpoint, "error_rate", until=NOW)) == 2


def test_latest_grades_reads_every_endpoint_in_one_query(world, endpoint):
    other = make_endpoint(world.team, name="second")
    empty = make_endpoint(world.team, name="never scanned")
    bulk_scans(endpoint, NOW - timedelta(days=3), 40, timedelta(hours=1), grades=("A", "B"))
    scan_at(other, NOW - timedelta(hours=1), CAPPED_C)

    with CaptureQueriesContext(connection) as queries:
        latest = latest_grades([endpoint, other, empty], n=30)

    assert len(queries.captured_queries) == 1
    assert len(latest[endpoint.pk]) == 30
    assert latest[endpoint.pk][-1].at == NOW - timedelta(days=3) + timedelta(hours=39)
    assert [p.grade for p in latest[other.pk]] == ["C"]
    assert latest[other.pk][0].capped == 1
    assert latest[empty.pk] == []


def test_latest_grades_never_reads_another_teams_scans(world, endpoint):
    foreign = make_endpoint(world.other_team, name="foreign")
    scan_at(foreign, NOW - timedelta(hours=1), GRADE_A)
    # An endpoint object claiming the other team's id is still read through its own team.
    endpoint.pk, endpoint.team_id = foreign.pk, world.team.pk

    assert latest_grades([endpoint])[foreign.pk] == []
