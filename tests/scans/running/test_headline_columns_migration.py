"""The migration that adds a scan's headline figures, caps, capacity section and its checks'
reasons as columns fills them, for the scans stored before it, with what a worker of this
release writes as it stores a report (scans/running/worker.py), so pages and charts read the
same figures for old scans as for new ones. Run in another process on a populated scratch
database, as test_report_columns_migration.py does; every row is kept."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from scans.running.worker import REPORT_COLUMNS_VERSION, check_reason, report_columns, score_fields
from tests.conftest import scratch_database
from tests.helpers.factories import measured_report
from tests.helpers.paths import ROOT

BEFORE = ("scans", "0027_apprise_channel_kind")
AFTER = ("scans", "0028_scan_headline_columns")
COLUMNS = ("ttft_p50_ms", "ttft_p95_ms", "tokens_per_s", "tokens_basis", "first_answer_p50_ms",
           "thinking_p50_ms", "capacity_found", "report_columns_version")

SCRIPT = r"""
import json, sys
import django
django.setup()
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

BEFORE, AFTER = [tuple(sys.argv[1].split(":"))], [tuple(sys.argv[2].split(":"))]
COLUMNS = sys.argv[3].split(",")
reports = json.loads(sys.stdin.read())
executor = MigrationExecutor(connection)
executor.migrate(BEFORE)
apps = executor.loader.project_state(BEFORE).apps
Team = apps.get_model("accounts", "Team")
Endpoint = apps.get_model("scans", "Endpoint")
Scan = apps.get_model("scans", "Scan")
CheckResult = apps.get_model("scans", "CheckResult")
team = Team._default_manager.create(name="Acme", slug="acme")
endpoint = Endpoint._default_manager.create(team=team, name="e", base_url="http://127.0.0.1:9/v1",
                                            model="m", levels=[1], badge_key="key-e")
ids = {}
for name, report in reports.items():
    status = "errored" if report is None else "succeeded"
    scan = Scan._default_manager.create(endpoint=endpoint, trigger="schedule", status=status,
                                        report=report)
    ids[name] = scan.pk
    for check in (report or {}).get("checks", []):
        CheckResult._default_manager.create(
            scan=scan, endpoint=endpoint, check_id=check["id"], status=check["status"],
            counted=check["counted"], measured_at="2026-12-01T00:00:00Z",
            scoring_version="1.0.0")
before = Scan._default_manager.count(), CheckResult._default_manager.count()

executor = MigrationExecutor(connection)
executor.migrate(AFTER)
apps = executor.loader.project_state(AFTER).apps
Scan = apps.get_model("scans", "Scan")
CheckResult = apps.get_model("scans", "CheckResult")
out = {name: {**Scan._default_manager.filter(pk=pk).values(*COLUMNS, "caps_applied").get(),
              "reasons": dict(CheckResult._default_manager.filter(scan_id=pk)
                              .exclude(reason="").values_list("check_id", "reason"))}
       for name, pk in ids.items()}
after = Scan._default_manager.count(), CheckResult._default_manager.count()
print(json.dumps({"rows": out, "kept": before == after}))
"""


def _capped(report: dict) -> dict:
    score = {**report["score"], "caps_applied": [{"id": "error_rate_cap", "grade": "D"}, "junk"]}
    return {**report, "score": score}


def test_existing_scans_get_the_columns_a_worker_of_this_release_writes():
    real = measured_report()
    reports = {
        "measured": real,
        "capped": _capped(real),
        "odd figures": {**real, "levels": [{"ttft_ms": {"p50": "fast", "p95": None},
                                            "generation_rate": {"median": 12.5,
                                                                "basis": "chunks"}}],
                        "capacity": {"concurrency": 8, "reason": "met", "slo": {"ttft": 1}}},
        "no levels": {**real, "levels": []},
        # many rows, so the backfill takes more than one batch
        **{f"more {i}": real for i in range(600)},
        "errored": None,
    }
    env = {**os.environ, "DATABASE_URL": scratch_database("headline_columns"),
           "DJANGO_SETTINGS_MODULE": "tokvera_site.settings"}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, ":".join(BEFORE), ":".join(AFTER), ",".join(COLUMNS)],
        input=json.dumps(reports), cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])

    assert result["kept"]  # every scan and check row is still there
    for name, report in reports.items():
        row = result["rows"][name]
        if report is None:
            assert row["report_columns_version"] == 0 and row["ttft_p50_ms"] is None
            continue
        expected = report_columns(report)
        assert {c: row[c] for c in COLUMNS} == {c: expected[c] for c in COLUMNS}, name
        assert row["caps_applied"] == score_fields(report).caps_applied, name
        assert row["reasons"] == {c["id"]: check_reason(c) for c in report["checks"]
                                  if check_reason(c)}, name
    assert result["rows"]["measured"]["report_columns_version"] == REPORT_COLUMNS_VERSION
    assert result["rows"]["measured"]["ttft_p50_ms"] == real["levels"][0]["ttft_ms"]["p50"]
    assert result["rows"]["capped"]["caps_applied"] == ["error_rate_cap"]
    assert result["rows"]["odd figures"]["tokens_basis"] == "chunks"
    assert result["rows"]["measured"]["reasons"]  # the unmeasured checks say why
