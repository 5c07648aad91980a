"""What retention and rollups cost: the storage of one endpoint-year of
5-minute scans, and the pruning pass on a table of a million scans. Not collected by pytest;
run by hand against a scratch database (it empties the scan tables there):

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/tokvera_bench_retention \\
        .venv/bin/python tests/perf/bench_retention.py --report /tmp/report.json

`--report` is a report.json from a real scan (`tokvera target --port 18931 &` then
`tokvera scan --model m --out /tmp/scan http://127.0.0.1:18931/v1`: levels 1, 4, 16 with
20/20/64 requests, the site's default plan); without it the script runs that scan itself.

(a) One endpoint, 105,120 scans (a year every 5 minutes), inserted with INSERT … SELECT
generate_series: the last REPORT_RETENTION_DAYS with the full report, the older ones with its
summary (what the pass leaves: scans/history/retention.py), ten CheckResult rows per scan as the
worker writes them, then the rollups (one first pass). Prints pg_total_relation_size of each
table after VACUUM ANALYZE (the steady state: a pruned report's old space is reused by new
rows), and what keeping every full report would take.
(b) Other endpoints' scans (with a small report) up to 1,000,000 rows; then the pass prunes
the endpoint's full reports older than one day (89 days of them) in batches of 500 while another
connection
inserts and updates scans every 20 ms: the median batch, the total, the writer's slowest
statement, and whether any lock on scans_scan stronger than ROW EXCLUSIVE was ever seen.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tokvera_site.settings")
os.environ.setdefault("DATABASE_URL",
                      "postgres://postgres@127.0.0.1:5432/tokvera_bench_retention")

YEAR = 365 * 288  # 5-minute scans in a year: 105,120
FILLER = {"target": {"base_url": "http://127.0.0.1:18931/v1"}, "plan": {"levels": [1, 4, 16]},
          "levels": [{"ttft_ms": {"p50": 35.0, "p95": 61.0}}], "checks": []}
TABLES = ("scans_scan", "scans_checkresult", "scans_scanrollup", "scans_checkrollup")


def _ensure_database() -> None:
    import psycopg
    from django.db import connection

    params = {**connection.get_connection_params(), "dbname": "postgres", "autocommit": True}
    params.pop("cursor_factory", None)
    name = connection.settings_dict["NAME"]
    with psycopg.connect(**params) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')


def _real_report(path: str | None) -> dict:
    if path:
        return json.loads(Path(path).read_text())
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    tokvera = str(Path(sys.executable).with_name("tokvera"))
    target = subprocess.Popen([tokvera, "target", "--port", str(port), "--ttft-ms", "30",
                               "--itl-ms", "3"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        time.sleep(2)
        out = tempfile.mkdtemp()
        subprocess.run([tokvera, "scan", "--model", "m", "--quiet", "--out", out,
                        f"http://127.0.0.1:{port}/v1"], check=True, capture_output=True)
        return json.loads((Path(out) / "report.json").read_text())
    finally:
        target.terminate()
        target.wait()


def _sizes() -> dict[str, dict[str, int]]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")  # not FULL: the steady state a running site reaches
    sizes = {}
    with connection.cursor() as cursor:
        for table in TABLES:
            sql = ("SELECT pg_total_relation_size(%s), pg_relation_size(%s), "  # noqa: S608
                   f"pg_indexes_size(%s), (SELECT count(*) FROM {table})")  # our own names
            cursor.execute(sql, [table, table, table])
            total, heap, indexes, rows = cursor.fetchone()
            sizes[table] = {"total": total, "heap": heap, "indexes": indexes,
                            "toast": total - heap - indexes, "rows": rows}
    return sizes


def _mb(n: float) -> str:
    return f"{n / 1e6:,.1f} MB"


_SCAN_COLUMNS = """
    public_id, trigger, slot, status, error_reason, queued_at, started_at, finished_at,
    deadline_at, report, grade, points, uncapped_grade, scoring_version, provisional, pushed,
    tool_version, endpoint_id, report_digest, location, origin, down, capacity_outcome,
    capacity_output_unit, report_pruned_at, partition_month
"""


def _insert_scans(endpoint_id: int, count: int, full: dict, summary: dict, keep_full: int,
                  now, pruned: bool = True) -> None:
    """`count` 5-minute scans ending now: the newest `keep_full` with `full`, the others
    with `summary` (marked pruned)."""
    from django.db import connection

    from common import time_partitions
    from scans.models import scan_partitions

    month = time_partitions.month_start(now - timedelta(minutes=5 * count + 1))
    while month <= time_partitions.month_start(now):
        scan_partitions.ensure_scan_month(month)
        month = time_partitions.next_month(month)
    with connection.cursor() as cursor:
        cursor.execute(f"""
            INSERT INTO scans_scan ({_SCAN_COLUMNS})
            SELECT gen_random_uuid(), 'schedule', t, 'succeeded', '', t, t + interval '2 s',
                   t + interval '40 s', t + interval '10 min',
                   CASE WHEN i > %(count)s - %(keep)s THEN %(full)s::jsonb ELSE %(summary)s::jsonb END,
                   'A', 100.0, 'A', '0.9.0', true, false, '0.1.0', %(endpoint)s, '', 'site',
                   'http://127.0.0.1:18931', false, '', '',
                   CASE WHEN i > %(count)s - %(keep)s OR NOT %(pruned)s THEN NULL ELSE %(now)s END,
                   date_trunc('month', t AT TIME ZONE 'UTC')::date
            FROM generate_series(1, %(count)s) AS i,
                 LATERAL (SELECT %(now)s::timestamptz - (%(count)s - i) * interval '5 min'
                          - interval '1 min' AS t) AS times
        """, {"count": count, "keep": keep_full, "full": json.dumps(full),  # noqa: S608
              "summary": json.dumps(summary), "endpoint": endpoint_id, "now": now,
              "pruned": pruned})


def _insert_check_results(endpoint_id: int) -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("""
            INSERT INTO scans_checkresult (check_id, value, status, counted, measured_at,
                                           scoring_version, endpoint_id, scan_id,
                                           partition_month)
            SELECT c ->> 'id',
                   CASE jsonb_typeof(c -> 'value') WHEN 'number' THEN (c ->> 'value')::float
                        WHEN 'boolean' THEN (c ->> 'value')::boolean::int::float END,
                   c ->> 'status', (c ->> 'counted')::boolean, s.finished_at, '0.9.0',
                   s.endpoint_id, s.id, s.partition_month
            FROM scans_scan s, jsonb_array_elements(s.report -> 'checks') AS c
            WHERE s.endpoint_id = %s
        """, [endpoint_id])


def _endpoint(team, name: str):
    from tests.helpers.factories import make_endpoint

    return make_endpoint(team, name=name, interval_minutes=5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--report", help="a real report.json (default: scan tokvera target)")
    parser.add_argument("--total", type=int, default=1_000_000, help="scans in part (b)")
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--reuse", action="store_true",
                        help="keep the endpoint-year a previous run inserted (rollups redone)")
    args = parser.parse_args()

    import django

    django.setup()
    _ensure_database()
    from django.core.management import call_command
    from django.db import connection
    from django.utils import timezone

    call_command("migrate", verbosity=0)
    from django.contrib.auth import get_user_model

    from accounts import teams
    from accounts.models import Team
    from scans.history import retention, rollups
    from scans.models import Endpoint, RollupWatermark, Scan

    kept = (Endpoint.dangerously_unscoped.filter(name="endpoint-year").first()
            if args.reuse else None)
    if kept is not None and Scan.dangerously_unscoped.filter(endpoint=kept).count() == YEAR:
        with connection.cursor() as cursor:
            cursor.execute("TRUNCATE scans_scanrollup, scans_checkrollup")
            cursor.execute("DELETE FROM scans_scan WHERE endpoint_id <> %s", [kept.pk])
        Endpoint.dangerously_unscoped.exclude(pk=kept.pk).delete()
        team = kept.team
    else:
        kept = None
        with connection.cursor() as cursor:
            cursor.execute("TRUNCATE scans_scan, scans_checkresult, scans_scanrollup, "
                           "scans_checkrollup, scans_pushedreportbody CASCADE")
        Team.dangerously_unscoped.filter(slug__startswith="bench-ret").delete()
        owner, _ = get_user_model().objects.get_or_create(username="bench-retention-owner")
        team = teams.create_team(f"bench-ret-{os.getpid()}", "Bench retention", owner=owner)
    RollupWatermark.objects.all().delete()

    full = _real_report(args.report)
    summary = retention.summary_of(full)
    days = 90
    keep = days * 288
    now = timezone.now()
    print(f"report.json: {len(json.dumps(full)):,} bytes as JSON, its summary "
          f"{len(json.dumps(summary)):,}; {len(full['checks'])} checks")

    # (a) one endpoint-year
    if kept is None:
        endpoint = _endpoint(team, "endpoint-year")
        started = time.monotonic()
        _insert_scans(endpoint.pk, YEAR, full, summary, keep, now)
        _insert_check_results(endpoint.pk)
        print(f"(a) inserted {YEAR:,} scans and their check rows in "
              f"{time.monotonic() - started:.0f} s")
    else:
        endpoint = kept
        now = Scan.dangerously_unscoped.filter(endpoint=kept).latest("queued_at").queued_at
        print(f"(a) reusing the {YEAR:,} scans of a previous run")
    started = time.monotonic()
    result = rollups.roll_up(budget_s=float("inf"))
    print(f"(a) first rollup pass over the year: {result}")
    with connection.cursor() as cursor:
        cursor.execute("SELECT avg(pg_column_size(report)) FILTER (WHERE report_pruned_at IS NULL),"
                       " avg(pg_column_size(report)) FILTER (WHERE report_pruned_at IS NOT NULL)"
                       " FROM scans_scan")
        full_bytes, summary_bytes = (float(v) for v in cursor.fetchone())
    sizes = _sizes()
    total = sum(s["total"] for s in sizes.values())
    print(f"(a) stored report (compressed): full {full_bytes:,.0f} bytes, summary "
          f"{summary_bytes:,.0f} bytes")
    for table, s in sizes.items():
        print(f"    {table:18} {s['rows']:>9,} rows  total {_mb(s['total']):>11}  heap "
              f"{_mb(s['heap'])}, toast {_mb(s['toast'])}, indexes {_mb(s['indexes'])}")
    print(f"(a) per endpoint-year: {_mb(total)} with {days} days of full reports; "
          f"every full report kept would add about "
          f"{_mb((YEAR - keep) * (full_bytes - summary_bytes))}")

    # (b) a million scans, then the pass
    others = max(0, args.total - YEAR)
    started = time.monotonic()
    per = 100_000
    made = 0
    while made < others:
        n = min(per, others - made)
        other = _endpoint(team, f"filler-{made // per}")
        # A small report: what is pruned below is the endpoint-year's real full reports;
        # the other rows only make the table (and its indexes) a million rows long.
        _insert_scans(other.pk, n, FILLER, FILLER, 0, now)
        made += n
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE scans_scan")
        cursor.execute("SELECT count(*) FROM scans_scan")
        rows = cursor.fetchone()[0]
        cursor.execute("SELECT count(*) FROM scans_scan WHERE report_pruned_at IS NULL AND "
                       "report IS NOT NULL AND finished_at < now() - interval '1 day'")
        due = cursor.fetchone()[0]
    print(f"(b) scans_scan holds {rows:,} rows ({time.monotonic() - started:.0f} s to add); "
          f"{due:,} full reports older than a day")

    params = {**connection.get_connection_params(), "autocommit": True}
    params.pop("cursor_factory", None)
    stop = threading.Event()
    writes: list[float] = []
    strong_locks: list[str] = []

    def writer():
        import psycopg

        with psycopg.connect(**params) as conn:
            recent = conn.execute("SELECT id FROM scans_scan WHERE endpoint_id = %s ORDER BY "
                                  "queued_at DESC LIMIT 1", [endpoint.pk]).fetchone()[0]
            while not stop.is_set():
                t = time.perf_counter()
                conn.execute(f"""INSERT INTO scans_scan ({_SCAN_COLUMNS})
                    SELECT gen_random_uuid(), 'manual', NULL, 'queued', '', now(), NULL, NULL,
                           NULL, NULL, '', NULL, '', '', true, false, '', %s, '', 'site', '',
                           false, '', '', NULL,
                           date_trunc('month', now() AT TIME ZONE 'UTC')::date""",
                             [endpoint.pk])  # noqa: S608
                conn.execute("UPDATE scans_scan SET heartbeat_at = now() WHERE id = %s",
                             [recent])
                writes.append(time.perf_counter() - t)
                time.sleep(0.02)

    def watcher():
        import psycopg

        with psycopg.connect(**params) as conn:
            while not stop.is_set():
                for (mode,) in conn.execute(
                        "SELECT mode FROM pg_locks WHERE relation = 'scans_scan'::regclass AND "
                        "mode NOT IN ('AccessShareLock', 'RowShareLock', 'RowExclusiveLock')"):
                    strong_locks.append(mode)
                time.sleep(0.05)

    threads = [threading.Thread(target=writer), threading.Thread(target=watcher)]
    for t in threads:
        t.start()
    time.sleep(1)
    before = len(writes)
    result = retention.prune(batch=args.batch, budget_s=float("inf"), days=1)
    during = writes[before:]
    stop.set()
    for t in threads:
        t.join()
    per_scan_ms = result.seconds / max(1, result.scans) * 1000
    print(f"(b) {result}")
    print(f"(b) median batch {result.median_batch_s * 1000:.0f} ms "
          f"(p90 {statistics.quantiles(result.batch_seconds, n=10)[-1] * 1000:.0f} ms) for "
          f"{args.batch} scans; {per_scan_ms:.2f} ms a scan; total {result.seconds:.1f} s for "
          f"{result.scans:,}")
    print(f"(b) the whole backlog of a 1,000,000-scan table (the 75 % older than 90 days, "
          f"on the first pass after turning retention on): about "
          f"{0.75 * 1_000_000 * per_scan_ms / 1000 / 60:.0f} min at this rate; a steady "
          f"hourly pass prunes about {1_000_000 / 8760:.0f} scans, "
          f"{1_000_000 / 8760 * per_scan_ms:.0f} ms")
    print(f"(b) a writer inserted a scan and updated another every 20 ms meanwhile: "
          f"{len(during)} rounds, median {statistics.median(during) * 1000:.1f} ms, slowest "
          f"{max(during) * 1000:.1f} ms; locks on scans_scan stronger than ROW EXCLUSIVE "
          f"seen: {sorted(set(strong_locks)) or 'none'}")
    RollupWatermark.objects.all().delete()  # the first pass after deploying, on 1M scans
    result = rollups.roll_up(budget_s=float("inf"))
    print(f"(b) first rollup pass over the 1,000,000-scan table: {result}")
    result = rollups.roll_up(budget_s=float("inf"))
    print(f"(b) the next rollup pass (steady state): {result}")


if __name__ == "__main__":
    main()
