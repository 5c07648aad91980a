"""`manage.py regrade_scans`: stored scans re-graded under 1.0.0 from the numbers their reports
stored (never re-measured), each re-grade marked, idempotent, scoped, and said in one line."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from scans.grader import regrade
from scans.history.retention import summary_of
from scans.models import AlertEvent, CheckResult, Endpoint, Scan, ScanTrigger
from scans.running import worker as scan_worker
from tests.helpers.factories import make_endpoint
from tests.scans.conftest import with_values
from tests.scans.history.versions import CHANGED_LETTER, SAME_LETTER, report_under, stored_scan

pytestmark = pytest.mark.django_db

WHEN = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)


def run(*args: str) -> str:
    out = StringIO()
    call_command("regrade_scans", "--scoring-version", "1.0.0", *args, stdout=out)
    return out.getvalue()


def reread(scan: Scan) -> Scan:
    return Scan.dangerously_unscoped.get(pk=scan.pk)


def check_rows(scan: Scan) -> dict[str, tuple]:
    return {row.check_id: (row.value, row.status, row.counted, row.scoring_version)
            for row in CheckResult.dangerously_unscoped.filter(scan_id=scan.pk)}


def test_a_0_9_0_scan_is_regraded_under_1_0_0_from_its_stored_numbers(endpoint):
    same = stored_scan(endpoint, WHEN, SAME_LETTER)
    moved = stored_scan(endpoint, WHEN + timedelta(hours=1), CHANGED_LETTER)
    stored = copy.deepcopy(moved.report)
    values_before = {k: v[0] for k, v in check_rows(moved).items()}
    assert (moved.grade, moved.points, moved.scoring_version, moved.provisional) == (
        "A", 93.5, "0.9.0", True)

    out = run()

    assert out.strip() == ("scoring 1.0.0: 2 scanned, 2 re-graded (1 same letter, 1 changed), "
                           "0 skipped")
    moved, same = reread(moved), reread(same)
    assert (moved.grade, float(moved.points), moved.uncapped_grade, moved.scoring_version,
            moved.provisional) == ("B", 87.0, "B", "1.0.0", False)
    assert (same.grade, float(same.points), same.scoring_version) == ("A", 100.0, "1.0.0")
    # The stored report is what the grader's regrade makes of it: checks and score under
    # 1.0.0, the mark, every measured number and everything else as it was.
    assert moved.report == regrade(stored, "1.0.0")
    assert moved.report["measurements"]["regraded_from_scoring_version"] == "0.9.0"
    assert moved.report["levels"] == stored["levels"]
    # Each check's row: same value, the new status and version (check history reads these).
    rows = check_rows(moved)
    assert {k: v[0] for k, v in rows.items()} == values_before
    assert rows["inter_chunk_p95_at_concurrency_1"][1:] == ("fail", True, "1.0.0")
    assert {v[3] for v in rows.values()} == {"1.0.0"}


def test_a_second_run_changes_nothing(endpoint):
    scan = stored_scan(endpoint, WHEN, CHANGED_LETTER)
    run()
    after_first = reread(scan)
    rows = check_rows(scan)

    out = run()

    assert out.strip() == "scoring 1.0.0: 0 scanned, 0 re-graded (0 same letter, 0 changed), " \
                          "0 skipped"
    again = reread(scan)
    assert again.report == after_first.report
    assert (again.grade, again.points, again.scoring_version) == (
        after_first.grade, after_first.points, after_first.scoring_version)
    assert check_rows(scan) == rows


def test_pruned_reports_and_reports_without_checks_are_skipped_and_counted(endpoint):
    pruned = stored_scan(endpoint, WHEN, CHANGED_LETTER)
    Scan.dangerously_unscoped.filter(pk=pruned.pk).update(
        report=summary_of(pruned.report), report_pruned_at=WHEN + timedelta(days=40))
    empty = stored_scan(endpoint, WHEN + timedelta(hours=1), CHANGED_LETTER)
    Scan.dangerously_unscoped.filter(pk=empty.pk).update(report={**empty.report, "checks": []})
    fine = stored_scan(endpoint, WHEN + timedelta(hours=2), CHANGED_LETTER)

    out = run("--batch", "1")  # one scan per transaction: each batch goes on from the last

    assert out.strip() == ("1.0.0: 3 scanned, 1 re-graded (0 same, 1 changed), skipped 1 no "
                           "checks, 1 pruned")
    for kept in (pruned, empty):
        kept = reread(kept)
        assert (kept.grade, kept.scoring_version) == ("A", "0.9.0")
        assert "regraded_from_scoring_version" not in kept.report["measurements"]
    assert reread(fine).scoring_version == "1.0.0"


def test_team_scoping_leaves_other_teams_as_they_were(world, endpoint):
    ours = stored_scan(endpoint, WHEN, CHANGED_LETTER)
    theirs = stored_scan(make_endpoint(world.other_team, name="theirs"), WHEN, CHANGED_LETTER)

    out = run("--team", world.team.slug)

    assert "1 scanned, 1 re-graded" in out
    assert reread(ours).scoring_version == "1.0.0"
    assert (reread(theirs).grade, reread(theirs).scoring_version) == ("A", "0.9.0")


def test_endpoint_scoping_and_an_endpoint_of_another_team(world, endpoint):
    other = make_endpoint(world.team, name="other")
    ours = stored_scan(endpoint, WHEN, CHANGED_LETTER)
    left = stored_scan(other, WHEN, CHANGED_LETTER)

    run("--endpoint", str(endpoint.public_id))

    assert reread(ours).scoring_version == "1.0.0"
    assert reread(left).scoring_version == "0.9.0"
    with pytest.raises(CommandError, match="no endpoint"):
        run("--team", world.other_team.slug, "--endpoint", str(other.public_id))
    with pytest.raises(CommandError, match="no team"):
        run("--team", "nobody-here")


def test_a_dry_run_counts_and_writes_nothing(endpoint):
    scan = stored_scan(endpoint, WHEN, CHANGED_LETTER)
    stored = copy.deepcopy(scan.report)

    out = run("--dry-run")

    assert out.strip() == ("dry run, 1.0.0: 1 scanned, 1 re-graded (0 same, 1 changed), "
                           "skipped none")
    again = reread(scan)
    assert (again.grade, again.scoring_version, again.report) == ("A", "0.9.0", stored)
    assert {v[3] for v in check_rows(scan).values()} == {"0.9.0"}


def test_a_regrade_sends_no_alert_even_when_the_letter_falls_below_the_floor(endpoint):
    Endpoint.dangerously_unscoped.filter(pk=endpoint.pk).update(slo_grade_floor="A")
    scan = stored_scan(endpoint, WHEN, CHANGED_LETTER)
    events = AlertEvent.dangerously_unscoped.count()
    flag = Endpoint.dangerously_unscoped.get(pk=endpoint.pk).below_floor

    run()

    assert reread(scan).grade == "B"
    assert AlertEvent.dangerously_unscoped.count() == events
    assert Endpoint.dangerously_unscoped.get(pk=endpoint.pk).below_floor == flag


def test_the_summary_stays_within_80_columns_for_big_runs():
    from scans.running.regrading import RegradeResult

    result = RegradeResult("1.0.0", scanned=41_234, same_letter=30_000, changed_letter=1_234,
                           skipped={"pruned": 10_000})
    line = result.summary()
    assert len(line) <= 80
    for said in ("41234 scanned", "31234 re-graded", "30000 same", "1234 new",
                 "10000 pruned"):
        assert said in line
    huge = RegradeResult("1.0.0", dry_run=True, scanned=12_345_678, same_letter=9_876_543,
                         changed_letter=1_234_567,
                         skipped={"pruned": 1_000_000, "no checks": 234_568})
    assert len(huge.summary()) <= 80 and huge.summary().startswith("dry run, 12345678 scanned")


def test_a_down_scan_is_regraded_and_stays_down_with_no_letter(endpoint):
    values = with_values(SAME_LETTER, error_rate=1.0, error_rate_at_peak=1.0)
    report = report_under(values, "0.9.0")
    for level in report["levels"]:
        level["succeeded"] = 0  # nothing answered: down, a state and not a grade
    scan = scan_worker.store_report(
        Scan.dangerously_unscoped.create(endpoint=endpoint, trigger=ScanTrigger.SCHEDULE), report)
    assert (scan.down, scan.grade, scan.points) == (True, "", None)

    run()

    scan = reread(scan)
    assert (scan.down, scan.grade, scan.points, scan.scoring_version) == (True, "", None, "1.0.0")
    assert scan.report["score"]["grade"] == "F"  # report.json keeps the F the scoring gives
