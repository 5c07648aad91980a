"""What the SLO read model costs (seven burn spans and the status). Not collected by
pytest; run by hand against a scratch database:

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/tokvera_bench_slo \\
        .venv/bin/python tests/perf/bench_slo_windows.py --endpoints 50 --days 7

Builds (once; --rebuild to redo) N endpoints with D days of 5-minute scans, one in ten missing
its grade floor, then prints medians of several runs: the dashboard's 7-day windows of every
endpoint (one query), and one endpoint's 7-day window with its status and alert level, which
scans/notify/alerts.py reads after every stored scan.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tokvera_site.settings")
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/tokvera_bench_slo")

STEP = timedelta(minutes=5)


def _ensure_database() -> None:
    import psycopg
    from django.db import connection

    params = {**connection.get_connection_params(), "dbname": "postgres", "autocommit": True}
    name = connection.settings_dict["NAME"]
    with psycopg.connect(**params) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')


def _median_ms(fn, runs: int = 7) -> float:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


def build(endpoints: int, days: int) -> None:
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from accounts import teams
    from accounts.models import Team
    from scans.models import Endpoint, Scan, ScanStatus, ScanTrigger

    Team.dangerously_unscoped.filter(slug="bench-slo").delete()
    owner, _ = get_user_model().objects.get_or_create(username="bench-slo-owner")
    team = teams.create_team("bench-slo", "Bench SLO", owner=owner)
    now = timezone.now()
    per_endpoint = int(timedelta(days=days) / STEP)
    for i in range(endpoints):
        endpoint = Endpoint.dangerously_unscoped.create(
            team=team,
            name=f"endpoint {i}",
            base_url=f"http://10.0.{i // 250}.{i % 250}/v1",
            model="m",
            interval_minutes=5,
            slo_grade_floor="B",
        )
        scans = Scan.dangerously_unscoped.bulk_create(
            Scan(
                endpoint=endpoint,
                trigger=ScanTrigger.SCHEDULE,
                status=ScanStatus.SUCCEEDED,
                grade="C" if k % 10 == 0 else "A",
                scoring_version="0.9.0",
            )
            for k in range(per_endpoint)
        )
        for k, scan in enumerate(scans):
            scan.queued_at = now - (per_endpoint - k) * STEP
        Scan.dangerously_unscoped.bulk_update(scans, ["queued_at"], batch_size=5000)
        print(f"endpoint {i + 1}/{endpoints}: {per_endpoint} scans", flush=True)


def measure() -> None:
    from scans.history import slo_windows as slo
    from scans.models import Endpoint, Scan

    endpoints = list(Endpoint.dangerously_unscoped.filter(team__slug="bench-slo"))
    scans = Scan.dangerously_unscoped.filter(endpoint__team__slug="bench-slo").count()
    print(f"{len(endpoints)} endpoints, {scans} scans")
    every = _median_ms(lambda: slo.windows_for(endpoints, 7))
    print(f"dashboard: 7-day windows of {len(endpoints)} endpoints (one query): median {every:.0f} ms")

    def one():
        window = slo.window(endpoints[0], 7)
        return window.status, window.alert_level

    print(
        f"after each scan: one endpoint's 7-day window, status and alert level: "
        f"median {_median_ms(one, runs=15):.1f} ms"
    )
    thirty = _median_ms(lambda: slo.window(endpoints[0], 30), runs=7)
    print(f"endpoint page: one endpoint's 30-day window: median {thirty:.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoints", type=int, default=50)
    parser.add_argument("--days", type=int, default=7)
    parser.add_argument("--rebuild", action="store_true")
    args = parser.parse_args()
    import django

    django.setup()
    _ensure_database()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from scans.models import Endpoint

    if args.rebuild or not Endpoint.dangerously_unscoped.filter(team__slug="bench-slo").exists():
        build(args.endpoints, args.days)
    measure()


if __name__ == "__main__":
    main()
