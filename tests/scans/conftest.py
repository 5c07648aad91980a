"""Factories for the page tests: endpoints, scans at chosen times with realistic reports.

Reports are graded by scans.grader.scoring.grade() from chosen check values and wrapped like
report.json (tests/helpers/factories.make_report); scans are stored through scans.running.worker, the same
code the Celery task uses, then moved to the time the test wants.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta

import pytest
from django.test import Client

from scans.grader.scoring import CheckValue
from scans.models import CheckResult, Scan, ScanStatus, ScanTrigger
from scans.running import worker as scan_worker
from tests.helpers.factories import GOOD_VALUES, make_endpoint, make_report

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)

# Chosen check values and the grade scoring 0.9.0 gives them.
GRADE_A = GOOD_VALUES  # 100 points, A
GRADE_B = {**GOOD_VALUES, "generation_rate_load_ratio": CheckValue(0.5, basis="tokens"),
           "ttft_p99_load_ratio": CheckValue(3.0)}  # 85.2 points, B
CAPPED_C = {**GOOD_VALUES, "ttft_p95_at_concurrency_1": CheckValue(2500.0)}  # 87.0, B capped to C
CAPPED_D = {**GOOD_VALUES, "error_rate": CheckValue(0.08),
            "error_rate_at_peak": CheckValue(0.2)}  # 66.7 points, D (error_rate_over_5_percent)
NO_LETTER = {**GOOD_VALUES, "error_rate": CheckValue(None, "no request completed"),
             "error_rate_at_peak": CheckValue(None, "no request completed")}


def with_values(base: dict, **changes) -> dict:
    return {**base, **{k: CheckValue(v) if not isinstance(v, CheckValue) else v
                       for k, v in changes.items()}}


def report_for(values: dict = GRADE_A, version: str | None = None, model: str = "tiny") -> dict:
    """A report.json dict graded from `values`; `version` pretends another scoring version
    graded it (a 1.x version is not provisional)."""
    report = make_report(values, model=model)
    if version is not None:
        report = copy.deepcopy(report)
        report["score"]["scoring_version"] = version
        report["score"]["provisional"] = version.startswith("0.")
    return report


def scan_at(endpoint, when: datetime, values: dict = GRADE_A, *, version: str | None = None,
            status: str = ScanStatus.SUCCEEDED, error_reason: str = "",
            trigger: str = ScanTrigger.SCHEDULE) -> Scan:
    """A scan of `endpoint` queued at `when` (finished a minute later)."""
    scan = Scan.dangerously_unscoped.create(endpoint=endpoint, trigger=trigger)
    if status == ScanStatus.SUCCEEDED:
        scan_worker.store_report(scan, report_for(values, version, model=endpoint.model))
    elif status == ScanStatus.ERRORED:
        scan_worker.fail(scan.pk, error_reason or "refused to connect to 10.0.0.1: private address")
    elif status == ScanStatus.RUNNING:
        Scan.dangerously_unscoped.filter(pk=scan.pk).update(status=ScanStatus.RUNNING)
    finished = when + timedelta(minutes=1) if status in (ScanStatus.SUCCEEDED,
                                                         ScanStatus.ERRORED) else None
    Scan.dangerously_unscoped.filter(pk=scan.pk).update(
        queued_at=when, started_at=when, finished_at=finished)
    CheckResult.dangerously_unscoped.filter(scan_id=scan.pk).update(measured_at=finished or when)
    scan.refresh_from_db()
    return scan


def bulk_scans(endpoint, start: datetime, count: int, step: timedelta, *,
               grades=("A",), version: str = "0.9.0", check_values: dict | None = None) -> None:
    """`count` succeeded scans every `step` from `start`, written in bulk (for long histories).

    Grades cycle through `grades`; each scan gets one CheckResult per id in `check_values`
    (id → value), so a check's history can be read back.
    """
    points = {"A": 95.0, "B": 85.0, "C": 75.0, "D": 65.0, "F": 30.0}
    scans = Scan.dangerously_unscoped.bulk_create(
        Scan(endpoint=endpoint, trigger=ScanTrigger.SCHEDULE, status=ScanStatus.SUCCEEDED,
             grade=grades[i % len(grades)], uncapped_grade=grades[i % len(grades)],
             points=points.get(grades[i % len(grades)]), scoring_version=version,
             provisional=version.startswith("0."))
        for i in range(count)
    )
    for i, scan in enumerate(scans):  # queued_at is auto_now_add: set the chosen times after
        Scan.dangerously_unscoped.filter(pk=scan.pk).update(queued_at=start + i * step)
    if check_values:
        CheckResult.dangerously_unscoped.bulk_create(
            CheckResult(scan=scan, partition_month=scan.partition_month, endpoint=endpoint,
                        check_id=check_id, value=value,
                        status="pass", counted=True, measured_at=start + i * step,
                        scoring_version=version)
            for i, scan in enumerate(scans)
            for check_id, value in check_values.items()
        )


@pytest.fixture
def endpoint(world):
    return make_endpoint(world.team, name="llama on box")


@pytest.fixture
def owner_client(world) -> Client:
    client = Client()
    client.force_login(world.owner)
    return client


@pytest.fixture
def viewer_client(world) -> Client:
    client = Client()
    client.force_login(world.viewer)
    return client
