"""Scale benchmark for the team site. Not collected by pytest; run by hand:

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/tokvera_bench_site \\
        .venv/bin/python tests/perf/bench_site_scale.py --endpoints 1000 --days 90

Builds (once; --rebuild to redo) 1,000 endpoints with 90 days of hourly scans (~2.2 M scans,
~22 M check rows) with COPY, then times, as medians of several runs: the due-scan finder over
10,000 endpoints, the team dashboard, an endpoint's 90-day page and its history API. It prints
the data set's size on disk and the EXPLAIN of the history query.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlencode

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tokvera_site.settings")
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/tokvera_bench_site")
os.environ.setdefault("ALLOWED_HOSTS", "testserver,127.0.0.1")


def _ensure_database() -> None:
    import psycopg

    url = os.environ["DATABASE_URL"]
    name = url.rsplit("/", 1)[1]
    with psycopg.connect(url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname=%s", [name]).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')


def _median_ms(fn, runs: int = 7) -> float:
    fn()  # warm
    samples = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1000)
    return statistics.median(samples)


def build(endpoints: int, days: int, extra_endpoints: int) -> None:
    from django.db import connection

    from accounts import teams
    from common.time_partitions import month_start, next_month
    from scans.grader import scoring
    from scans.grader.scoring import CheckValue
    from scans.models import Endpoint, Scan, scan_partitions
    from tests.conftest import make_user

    if Scan.dangerously_unscoped.exists():
        return
    rng = random.Random(7)
    owner = make_user("bench-owner")
    team = teams.create_team("bench", "Bench", owner=owner)
    now = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    rows = [Endpoint(team=team, name=f"endpoint {i}", base_url=f"https://e{i}.example/v1",
                     model="m", levels=[1, 4, 16], interval_minutes=60,
                     next_scan_at=now + timedelta(minutes=rng.randrange(60)))
            for i in range(endpoints + extra_endpoints)]
    Endpoint.dangerously_unscoped.bulk_create(rows, batch_size=2000)
    endpoint_ids = list(Endpoint.dangerously_unscoped.filter(team=team).order_by("pk")
                        .values_list("pk", flat=True))[:endpoints]
    # A few report shapes, reused: the report JSON is not what the pages read.
    shapes = []
    for ttft in (250.0, 900.0, 2500.0):
        for err in (0.0, 0.03, 0.3):
            graded = scoring.grade({"ttft_p95_at_concurrency_1": CheckValue(ttft),
                                    "error_rate": CheckValue(err),
                                    "error_rate_at_peak": CheckValue(err),
                                    "metrics_endpoint": CheckValue(True),
                                    "ttft_p99_load_ratio": CheckValue(1.5)})
            shapes.append(graded)
    hours = days * 24
    month = month_start(now - timedelta(hours=hours))
    while month <= month_start(now):
        scan_partitions.ensure_scan_month(month)
        month = next_month(month)
    t0 = time.perf_counter()
    with connection.cursor() as cursor:
        raw = cursor.connection
        with raw.cursor() as cur:
            cur.execute("SELECT COALESCE(MAX(id), 0) FROM scans_scan")
            next_id = cur.fetchone()[0] + 1
            scan_cols = ("id, public_id, endpoint_id, trigger, slot, status, error_reason, "
                         "queued_at, started_at, finished_at, report, grade, points, "
                         "uncapped_grade, scoring_version, provisional, pushed, tool_version, "
                         "partition_month")
            check_cols = ("scan_id, endpoint_id, check_id, value, status, counted, measured_at, "
                          "scoring_version, partition_month")
            for eid in endpoint_ids:
                scans, checks = [], []
                for h in range(hours):
                    at = now - timedelta(hours=hours - h)
                    graded = shapes[rng.randrange(len(shapes))]
                    score = graded.score
                    scans.append((next_id, uuid.uuid4(), eid, "schedule", at, "succeeded", "",
                                  at, at, at + timedelta(minutes=2), json.dumps({"score": score}),
                                  score["grade"], score["points"], score["uncapped_grade"] or "",
                                  "0.9.0", True, False, "0.1.0", month_start(at)))
                    for c in graded.checks:
                        value = c["value"]
                        if isinstance(value, bool):
                            value = 1.0 if value else 0.0
                        checks.append((next_id, eid, c["id"], value, c["status"], c["counted"],
                                       at + timedelta(minutes=2), "0.9.0", month_start(at)))
                    next_id += 1
                with cur.copy(f"COPY scans_scan ({scan_cols}) FROM STDIN") as copy:
                    for row in scans:
                        copy.write_row(row)
                with cur.copy(f"COPY scans_checkresult ({check_cols}) FROM STDIN") as copy:
                    for row in checks:
                        copy.write_row(row)
            cur.execute(f"SELECT setval(pg_get_serial_sequence('scans_scan','id'), {next_id})")
            cur.execute("ANALYZE scans_scan; ANALYZE scans_checkresult; ANALYZE scans_endpoint")
    print(f"built {len(endpoint_ids)} endpoints x {hours} hourly scans in "
          f"{time.perf_counter() - t0:.0f} s")


def measure() -> None:
    from django.db import connection
    from django.test import Client
    from django.urls import reverse
    from django.utils import timezone

    from accounts.models import Team
    from scans.models import CheckResult, Endpoint, Scan
    from scans.running import dispatch

    with connection.cursor() as cur:
        cur.execute("SELECT pg_size_pretty(pg_database_size(current_database()))")
        size = cur.fetchone()[0]
    print(f"scans: {Scan.dangerously_unscoped.count():,}  check rows: "
          f"{CheckResult.dangerously_unscoped.count():,}  database size: {size}")
    due_ms = _median_ms(lambda: list(dispatch.due_endpoints(timezone.now() + timedelta(hours=1))))
    print(f"due-scan finder over {Endpoint.dangerously_unscoped.count():,} endpoints "
          f"(all due): median {due_ms:.1f} ms")
    team = Team.dangerously_unscoped.get(slug="bench")
    endpoint = Endpoint.dangerously_unscoped.filter(team=team).order_by("pk").first()
    client = Client()
    client.force_login(team.memberships.first().user)
    pages = {"dashboard": reverse("team-dashboard", kwargs={"slug": team.slug})}
    try:
        pages["endpoint page (90 d range)"] = reverse(
            "endpoint-detail", kwargs={"public_id": endpoint.public_id}) + "?range=90d"
    except Exception as exc:  # the page may not exist yet in this checkout
        print(f"endpoint page: not measured ({exc})")
    since = (timezone.now() - timedelta(days=90)).isoformat()
    pages["history API (90 d, one check)"] = (
        reverse("api-endpoint-history", kwargs={"public_id": endpoint.public_id})
        + "?" + urlencode({"check": "ttft_p95_at_concurrency_1", "since": since}))
    for name, url in pages.items():
        status = client.get(url).status_code
        print(f"{name}: HTTP {status}, median {_median_ms(lambda u=url: client.get(u)):.0f} ms")
    with connection.cursor() as cur:
        sql, params = (CheckResult.dangerously_unscoped.filter(
            endpoint=endpoint, check_id="ttft_p95_at_concurrency_1")
            .order_by("-measured_at").values("measured_at", "value")[:5000].query.sql_with_params())
        cur.execute("EXPLAIN " + sql, params)
        print("history query plan:\n  " + "\n  ".join(r[0] for r in cur.fetchall()))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--endpoints", type=int, default=1000)
    parser.add_argument("--days", type=int, default=90)
    parser.add_argument("--due-endpoints", type=int, default=10_000,
                        help="endpoints in total for the due-finder measurement")
    args = parser.parse_args()
    _ensure_database()
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command

    # As the tests do: serve static files as they are (no collectstatic), with DEBUG off.
    settings.STORAGES = {**settings.STORAGES, "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}}

    call_command("migrate", verbosity=0)
    build(args.endpoints, args.days, max(0, args.due_endpoints - args.endpoints))
    measure()


if __name__ == "__main__":
    main()
