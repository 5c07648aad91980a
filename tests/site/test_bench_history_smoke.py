"""The history-at-scale benchmark (tests/perf/bench_history.py) still runs: at a toy size,
against a scratch database, it reports every figure the capacity plan quotes. Its timings are
not checked here (a loaded test box says nothing of them)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import scratch_database
from tests.helpers.factories import measured_report
from tests.helpers.paths import ROOT

pytestmark = pytest.mark.django_db

PAGES = {"dashboard", "endpoint page", "API endpoint list", "status page", "API metrics"}


def test_benchmark_reports_every_figure_with_its_goal(tmp_path):
    report = tmp_path / "report.json"
    report.write_text(json.dumps(measured_report()))
    out = tmp_path / "result.json"
    env = {**os.environ, "DATABASE_URL": scratch_database("bench_history", migrated=True),
           "PROBE_RETENTION_DAYS": "1", "OUTBOUND_ALLOW": "loopback"}
    done = subprocess.run(
        [sys.executable, "tests/perf/bench_history.py", "--endpoints", "12", "--teams", "3",
         "--big-team", "6", "--days", "1", "--rollup-days", "2", "--runs", "2",
         "--store-scans", "6", "--store-procs", "2", "--report", str(report),
         "--json-out", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stderr[-3000:]

    result = json.loads(out.read_text())
    assert result["site"]["endpoints"] == 12
    assert result["site"]["scans"] == 12 * 24
    assert set(result["pages"]) == PAGES
    for page in result["pages"].values():
        assert page["status"] == 200
        assert {"p50_ms", "p99_ms", "goal", "meets_goal"} <= set(page)
    assert result["scans_stored"]["succeeded"] == 6
    assert {"per_s", "goal", "meets_goal"} <= set(result["scans_stored"])
    assert {"task_s", "day_of_reports"} <= set(result["retention"])
    assert result["endpoint_year"]["mb"] > 0
    assert result["endpoint_year"]["mb_at_5_min_scans"] > result["endpoint_year"]["mb"]
    assert {"goal", "meets_goal", "parts_mb"} <= set(result["endpoint_year"])
    assert {"cpus", "load_before", "load_after"} <= set(result["machine"])
    assert "meets_goals" in result


def test_benchmark_lines_fit_80_columns(tmp_path):
    sys.path.insert(0, str(ROOT / "tests" / "perf"))
    from bench_history import _lines

    page = {"p50_ms": 12345.6, "p99_ms": 123456.7, "status": 200, "meets_goal": False}
    result = {
        "site": {"endpoints": 10_000, "teams": 500, "scans": 7_200_000,
                 "database_mb": 1_234_567.0},
        "scans_stored": {"per_s": 1234.5, "scans": 600, "seconds": 12.34, "processes": 16,
                         "meets_goal": True},
        "pages": dict.fromkeys(PAGES, page),
        "retention": {"task_s": 1234.5, "day_of_reports": {"ms_per_scan": 12.34}},
        "endpoint_year": {"mb": 12345.6, "mb_without_full_reports": 1234.5,
                          "mb_at_5_min_scans": 123456.7, "interval_minutes": 1440,
                          "meets_goal": False},
        "machine": {"cpus": 64, "load_before": [12.5, 1, 1], "load_after": [99.99, 1, 1]},
    }
    lines = _lines(result)
    assert len(lines) == 2 + len(PAGES) + 4
    assert all(len(line) <= 80 for line in lines)
