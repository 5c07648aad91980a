"""`manage.py fill_scan_columns`: a scan a worker of the previous release stored during the
rollout (its report kept, its URL, load and down-cause columns empty) gets the columns a worker
of this release writes; a second run changes nothing. Real PostgreSQL, a report from a real
scan of `tokvera target`."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection

from scans.models import CheckResult, Scan, ScanStatus
from tests.helpers.factories import make_endpoint, make_scan, measured_report

pytestmark = pytest.mark.django_db

EMPTY = {"target_url": "", "load_plan": None, "preflight_stopped": False, "preflight_cause": "",
         "failure_summary": "", "preflight_warnings": None, "ttft_p50_ms": None,
         "ttft_p95_ms": None, "tokens_per_s": None, "tokens_basis": "",
         "first_answer_p50_ms": None, "thinking_p50_ms": None, "caps_applied": None,
         "capacity_found": None, "report_columns_version": 0}
COLUMNS = tuple(EMPTY)


def _columns(scan_id: int) -> dict:
    return Scan.dangerously_unscoped.filter(pk=scan_id).values(*COLUMNS).get()


def _reasons(scan_id: int) -> dict:
    return dict(CheckResult.dangerously_unscoped.filter(scan_id=scan_id).exclude(reason="")
                .values_list("check_id", "reason"))


def _row_version(scan_id: int) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT xmin::text FROM scans_scan WHERE id = %s", [scan_id])
        return cursor.fetchone()[0]


def _fill() -> str:
    out = StringIO()
    call_command("fill_scan_columns", "--batch", "1", stdout=out)
    return out.getvalue()


def test_fill_scan_columns_fills_what_an_old_worker_left_empty_and_a_second_run_changes_nothing(
        world):
    report = measured_report()
    endpoint = make_endpoint(world.team, base_url=report["target"]["base_url"])
    stored = make_scan(endpoint, report=report)  # stored by this release's worker
    written = _columns(stored.pk)
    assert written["target_url"] == report["target"]["base_url"] and written["load_plan"]
    assert written["ttft_p50_ms"] == report["levels"][0]["ttft_ms"]["p50"]
    assert written["tokens_per_s"] == report["levels"][0]["generation_rate"]["median"]
    reasons = _reasons(stored.pk)
    assert reasons  # the unmeasured checks say why
    old = make_scan(endpoint, report=report)
    Scan.dangerously_unscoped.filter(pk=old.pk).update(**EMPTY)  # as the old worker stored it
    CheckResult.dangerously_unscoped.filter(scan=old).update(reason="")
    unmeasured = make_scan(endpoint, status=ScanStatus.ERRORED)  # no report: nothing to fill

    assert _fill() == "Filled the report columns of 1 scan stored without them.\n"
    assert _columns(old.pk) == written
    assert _reasons(old.pk) == reasons
    assert _columns(unmeasured.pk) == EMPTY

    versions = {scan.pk: _row_version(scan.pk) for scan in (stored, old, unmeasured)}
    assert _fill() == "Filled the report columns of 0 scans stored without them.\n"
    assert {pk: _row_version(pk) for pk in versions} == versions  # no row rewritten
    assert _columns(old.pk) == written
