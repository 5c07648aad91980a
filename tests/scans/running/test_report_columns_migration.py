"""The migration that adds a scan's base URL and load as columns fills them for the scans
stored before it, from each one's report (in batches), so lists and charts read the same
load and URL for old scans as for new ones. Run in another process on a scratch database, as
tests/scans/notify/test_channels_migration.py does."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from scans.endpoints import profile as load_profile
from tests.conftest import scratch_database
from tests.helpers.paths import ROOT

BEFORE = ("scans", "0021_delivery_plural_name")
AFTER = ("scans", "0023_h34f_scan_report_columns")

SCRIPT = r"""
import json, sys
import django
django.setup()
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

BEFORE, AFTER = [tuple(sys.argv[1].split(":"))], [tuple(sys.argv[2].split(":"))]
reports = json.loads(sys.stdin.read())
executor = MigrationExecutor(connection)
executor.migrate(BEFORE)
apps = executor.loader.project_state(BEFORE).apps
Team = apps.get_model("accounts", "Team")
Endpoint = apps.get_model("scans", "Endpoint")
Scan = apps.get_model("scans", "Scan")
team = Team._default_manager.create(name="Acme", slug="acme")
endpoint = Endpoint._default_manager.create(team=team, name="e", base_url="http://127.0.0.1:9/v1",
                                            model="m", levels=[1], badge_key="key-e")
ids = {}
for name, report in reports.items():
    status = "errored" if report is None else "succeeded"
    ids[name] = Scan._default_manager.create(endpoint=endpoint, trigger="schedule",
                                             status=status, report=report).pk

executor = MigrationExecutor(connection)
executor.migrate(AFTER)
apps = executor.loader.project_state(AFTER).apps
Scan = apps.get_model("scans", "Scan")
out = {name: {"load_plan": Scan._default_manager.get(pk=pk).load_plan,
              "target_url": Scan._default_manager.get(pk=pk).target_url}
       for name, pk in ids.items()}
print(json.dumps(out))
"""


def _report(base_url: str | None, plan: dict) -> dict:
    report: dict = {"plan": plan, "score": {"grade": "A"}, "levels": [{"ttft_ms": {"p50": 1}}]}
    if base_url is not None:
        report["target"] = {"base_url": base_url, "model": "m"}
    return report


def test_existing_scans_get_their_base_url_and_load_as_columns():
    dataset = {"name": "chats.jsonl", "lines": 120, "sha256": "ab" * 32}
    reports = {
        "levels": _report("http://127.0.0.1:8080/v1",
                          {"levels": [1, 4, 16], "requests_per_level": [20, 40, 80],
                           "max_tokens": 256, "workload": {"warmup": 2, "input_tokens": 4000,
                                                           "output_tokens": 256}}),
        "dataset": _report("https://llm.example.test/v1",
                           {"levels": [1], "requests_per_level": 20, "max_tokens": 128,
                            "workload": {"warmup": 0, "dataset": dataset}}),
        "before the nonce": _report("http://127.0.0.1:8081/v1",
                                    {"levels": [1, 2], "requests_per_level": 10,
                                     "max_tokens": 64}),
        "no target": _report(None, {"levels": [1], "requests_per_level": 5, "max_tokens": 8}),
        # many rows, so the backfill takes more than one batch
        **{f"more {i}": _report(f"http://127.0.0.1:{9000 + i}/v1",
                                {"levels": [1, i + 2], "requests_per_level": 10,
                                 "max_tokens": 64, "workload": {"warmup": i}})
           for i in range(1200)},
        "errored": None,
    }
    env = {**os.environ, "DATABASE_URL": scratch_database("report_columns"),
           "DJANGO_SETTINGS_MODULE": "tokvera_site.settings"}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, ":".join(BEFORE), ":".join(AFTER)],
        input=json.dumps(reports), cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])

    for name, report in reports.items():
        row = result[name]
        if report is None:
            assert row == {"load_plan": None, "target_url": ""}
            continue
        assert row["target_url"] == (report.get("target") or {}).get("base_url", "")
        # The load as the pages word it, from the column as from the report.
        from_column = load_profile.profile_of_row(row["load_plan"])
        assert from_column.label == load_profile.profile_of(report["plan"]).label, name
    # The text PostgreSQL's ->> gives, as the rollups read it (charts merge the two).
    assert result["levels"]["load_plan"]["pf_levels"] == "[1, 4, 16]"
    assert result["dataset"]["load_plan"]["pf_dataset_lines"] == "120"
    assert result["before the nonce"]["load_plan"]["pf_warmup"] is None
    assert load_profile.profile_of_row(result["dataset"]["load_plan"]).label.startswith(
        "1 × 20, chats.jsonl (120 prompts)")
