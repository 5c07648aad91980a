"""Scans graded under a chosen scoring version, as that version's rules grade them (not a
report relabelled): what the site stored before 1.0.0 was published."""

from __future__ import annotations

from datetime import datetime, timedelta

from scans.grader import scoring
from scans.models import CheckResult, Scan, ScanTrigger
from scans.running import worker as scan_worker
from tests.helpers.factories import GOOD_VALUES, make_report
from tests.scans.conftest import with_values

# All good: A under 0.9.0 and under 1.0.0 (100 points both).
SAME_LETTER = GOOD_VALUES
# A 200 ms gap between chunks: 0.9.0 warns (≤ 250 ms), 1.0.0 fails it (> 150 ms), so the
# letter moves from A (93.5 points) to B (87.0).
CHANGED_LETTER = with_values(GOOD_VALUES, inter_chunk_p95_at_concurrency_1=200.0)


def report_under(values: dict, version: str, model: str = "tiny") -> dict:
    """A report.json whose checks and score are `version`'s grading of `values`."""
    report = make_report(values, model=model)
    graded = scoring.grade(values, version)
    report["checks"], report["score"] = graded.checks, graded.score
    return report


def stored_scan(endpoint, when: datetime, values: dict = SAME_LETTER,
                version: str = "0.9.0") -> Scan:
    """A succeeded scan of `endpoint` stored by the worker, graded under `version`, queued at
    `when` and finished a minute later."""
    scan = Scan.dangerously_unscoped.create(endpoint=endpoint, trigger=ScanTrigger.SCHEDULE)
    scan_worker.store_report(scan, report_under(values, version, model=endpoint.model))
    finished = when + timedelta(minutes=1)
    Scan.dangerously_unscoped.filter(pk=scan.pk).update(queued_at=when, started_at=when,
                                                        finished_at=finished)
    CheckResult.dangerously_unscoped.filter(scan_id=scan.pk).update(measured_at=finished)
    scan.refresh_from_db()
    return scan
