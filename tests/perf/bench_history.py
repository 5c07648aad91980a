"""History at scale: a site of 10,000 endpoints in 500 teams with its history, and what it
costs to run. Not collected by pytest; run by hand against a scratch database:

    createdb -h 127.0.0.1 -U postgres tokvera_bench_history
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/tokvera_bench_history \\
    CACHE_URL=redis://127.0.0.1:6379/13 CELERY_BROKER_URL=redis://127.0.0.1:6379/12 \\
        nice -n 10 .venv/bin/python tests/perf/bench_history.py --report /tmp/scan/report.json

`--report` is a report.json from a real scan (tests/perf/bench_retention.py says how; without
it the script scans `tokvera target` itself). Defaults are the issue's size (--endpoints 10000
--teams 500 --days 30 --rollup-days 365): one team of --big-team endpoints (200), the others
spread over the remaining teams.

Build (once; --rebuild drops the database's rows and builds again), in SQL on the server, of
rows shaped as the site writes them:
- `--days` of scans at each endpoint's interval (the form's default, 60 min), every column the
  worker's store path writes (scans/running/worker.py: score, capacity and report columns,
  computed by its own functions from the real report), the full report (all of them younger
  than REPORT_RETENTION_DAYS), and one CheckResult row per check;
- rollups: the real rollup pass over those scans, then its rows repeated back in time to cover
  `--rollup-days` (hours and days, as a year of passes would have left them);
- liveness: a probe a minute (the default interval) for PROBE_RETENTION_DAYS plus a day and
  an hour (each UTC day its partition), the probe hours of `--rollup-days`, and each
  endpoint's standing.

Then it measures: the database's size per endpoint-year (measured bytes per row times the rows
an endpoint-year keeps at the default intervals and retention); p50/p99 (nearest rank) of
`--runs` warm requests of the big team's dashboard, an endpoint page, /api/v1/endpoints/, its
public status page and /api/v1/metrics (Django's test client, a member's session or a
read-only team token); scans stored per second through the worker's store function
(store_report) from `--store-procs` processes; and the retention task (prune_reports) as the
hourly beat runs it, plus a pruning pass over a day of full reports. It prints one line a
figure and a JSON object with every figure, its goal and whether it was met.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import sys
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "perf"))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tokvera_site.settings")
os.environ.setdefault("DATABASE_URL",
                      "postgres://postgres@127.0.0.1:5432/tokvera_bench_history")
os.environ.setdefault("ALLOWED_HOSTS", "testserver,127.0.0.1")

from bench_retention import _ensure_database, _real_report  # noqa: E402

__all__ = ["GOALS", "main", "run"]

#: The issue's goals: (figure, comparison, bound).
GOALS = {
    "scans_stored_per_s": (">=", 100.0),
    "page_p99_ms": ("<", 300.0),
    "mb_per_endpoint_year": ("<=", 5.0),
}
TEAM_PREFIX = "bench-history-"
LOCATION = "site"
PAGES = ("dashboard", "endpoint page", "API endpoint list", "status page", "API metrics")


# --- build ---------------------------------------------------------------------------------

def _team_sizes(endpoints: int, teams: int, big_team: int) -> list[int]:
    """The big team first, then the other endpoints spread evenly over the other teams."""
    big = min(big_team, endpoints)
    rest, others = endpoints - big, max(teams - 1, 0)
    if not others:
        return [endpoints]
    return [big] + [rest // others + (i < rest % others) for i in range(others)]


def _stored_columns(report: dict) -> dict:
    """The Scan row's columns as the worker's store path writes them for `report`."""
    from scans.running import worker

    fields = worker.score_fields(report)
    return {"grade": fields.grade, "points": fields.points,
            "uncapped_grade": fields.uncapped_grade, "scoring_version": fields.scoring_version,
            "provisional": fields.provisional, "down": fields.down,
            "caps_applied": fields.caps_applied,
            "tool_version": str(report.get("tool_version", ""))[:40],
            **worker.capacity_fields(report), **worker.report_columns(report)}


#: The Scan columns that differ from scan to scan; every other column holds what the store
#: path writes for the report (the model's defaults where it writes nothing).
_PER_SCAN = ("id", "public_id", "endpoint_id", "trigger", "slot", "location", "status",
             "queued_at", "started_at", "finished_at", "deadline_at", "heartbeat_at", "report",
             "partition_month")


def _insert_scans(report: dict, days: int, now) -> int:
    """`days` of succeeded scans of every endpoint, one per interval, ending now."""
    from django.db import connection

    from common import time_partitions
    from scans.models import Scan, scan_partitions

    month = time_partitions.month_start(now - timedelta(days=days + 1))
    while month <= time_partitions.month_start(now):
        scan_partitions.ensure_scan_month(month)
        month = time_partitions.next_month(month)
    row = Scan(**_stored_columns(report))
    fields = [f for f in Scan._meta.concrete_fields if f.column not in _PER_SCAN]
    names = ", ".join(f.column for f in fields)
    values = ", ".join(f"%({f.column})s::{f.db_type(connection)}" for f in fields)
    params = {f.column: f.get_db_prep_save(getattr(row, f.attname), connection) for f in fields}
    params.update(report=json.dumps(report), now=now, days=days, location=LOCATION)
    with connection.cursor() as cursor:
        cursor.execute(f"""
            INSERT INTO scans_scan (public_id, endpoint_id, trigger, slot, location, status,
                queued_at, started_at, finished_at, deadline_at, heartbeat_at, report,
                partition_month, {names})
            SELECT gen_random_uuid(), e.id, 'schedule', t, %(location)s, 'succeeded',
                   t, t + interval '2 s', t + interval '40 s', t + interval '10 min',
                   t + interval '40 s', %(report)s::jsonb,
                   date_trunc('month', t AT TIME ZONE 'UTC')::date, {values}
            FROM scans_endpoint AS e,
                 LATERAL generate_series(1, %(days)s * 1440 / e.interval_minutes) AS i,
                 LATERAL (SELECT date_trunc('minute', %(now)s::timestamptz)
                          - i * make_interval(mins => e.interval_minutes) AS t) AS times
        """, params)  # noqa: S608 - the column names and types are the model's own
        return cursor.rowcount


def _insert_check_results(report: dict) -> int:
    """One CheckResult row per check of every scan, as store_report writes them."""
    from django.db import connection

    from scans.running.worker import _numeric, check_reason

    checks = report["checks"]
    fields = _stored_columns(report)
    with connection.cursor() as cursor:
        cursor.execute("""
            INSERT INTO scans_checkresult (scan_id, partition_month, endpoint_id, check_id,
                value, status, counted, measured_at, scoring_version, reason)
            SELECT s.id, s.partition_month, s.endpoint_id, c.check_id, c.value, c.status,
                   c.counted,
                   s.finished_at, %s, c.reason
            FROM scans_scan AS s,
                 unnest(%s::text[], %s::float8[], %s::text[], %s::bool[], %s::text[])
                     AS c(check_id, value, status, counted, reason)
        """, [fields["scoring_version"], [c["id"] for c in checks],
              [_numeric(c.get("value")) for c in checks], [c["status"] for c in checks],
              [bool(c["counted"]) for c in checks], [check_reason(c) for c in checks]])
        return cursor.rowcount


def _repeat_rollups(days: int, rollup_days: int, now) -> None:
    """The rollup rows the pass wrote for the last `days`, repeated back in steps of `days`
    to cover `rollup_days`: what a year of passes leaves (a bucket the real pass already
    wrote, the partial first day, is kept as it is)."""
    from django.db import connection

    copies = math.ceil(rollup_days / days) - 1
    if copies < 1:
        return
    with connection.cursor() as cursor:
        for table in ("scans_scanrollup", "scans_checkrollup"):
            cursor.execute("SELECT column_name FROM information_schema.columns "
                           "WHERE table_name = %s AND column_name <> 'id'", [table])
            cols = [row[0] for row in cursor.fetchall()]
            shifted = ", ".join(
                f"{c} - k * make_interval(days => %(days)s)"
                if c in ("bucket_start", "first_at", "last_at") else c for c in cols)
            cursor.execute(f"""
                INSERT INTO {table} ({", ".join(cols)})
                SELECT {shifted} FROM {table}, generate_series(1, %(copies)s) AS k
                WHERE bucket_start - k * make_interval(days => %(days)s)
                      >= %(now)s::timestamptz - make_interval(days => %(rollup_days)s)
                ON CONFLICT DO NOTHING
            """, {"days": days, "copies": copies, "now": now,  # noqa: S608 - own names
                  "rollup_days": rollup_days})


def _insert_liveness(rollup_days: int, now) -> None:
    """A probe every probe interval for PROBE_RETENTION_DAYS, a day and an hour (the hourly
    pass drops the oldest UTC day, wholly past retention: its partition), the probe hours of
    `rollup_days`, and each endpoint's standing."""
    from django.conf import settings
    from django.db import connection

    from scans.liveness import partitions

    keep_s = settings.PROBE_RETENTION_DAYS * 86400 + 86400 + 3600
    partitions.ensure_probe_days(now - timedelta(seconds=s)
                                 for s in [*range(0, keep_s, 3600), keep_s])
    hour = "date_trunc('hour', %(now)s::timestamptz)"
    with connection.cursor() as cursor:
        cursor.execute("""
            INSERT INTO scans_proberesult (endpoint_id, location, at, ok, counted, status_code,
                                           ttft_ms, kind, cause)
            SELECT e.id, %(location)s, %(now)s::timestamptz - i * make_interval(
                       secs => e.probe_interval_s), true, true, 200, 30 + (i %% 17), '', ''
            FROM scans_endpoint AS e,
                 LATERAL generate_series(1, %(keep_s)s / e.probe_interval_s) AS i
        """, {"location": LOCATION, "now": now, "keep_s": keep_s})
        cursor.execute(f"""
            INSERT INTO scans_probehour (endpoint_id, location, hour, probes, failed,
                covered_s, down_s, ttft_sum, ttft_n, ttft_min, ttft_max)
            SELECT e.id, %(location)s, {hour} - h * interval '1 hour', 3600 / e.probe_interval_s,
                   0, 3600, 0, 38.0 * 3600 / e.probe_interval_s, 3600 / e.probe_interval_s,
                   30, 46
            FROM scans_endpoint AS e, generate_series(1, %(hours)s) AS h
        """, {"location": LOCATION, "now": now, "hours": rollup_days * 24})  # noqa: S608
        cursor.execute("""
            INSERT INTO scans_livenessstate (endpoint_id, location, failures, successes, down,
                since, streak_since, last_at, last_ok, last_ttft_ms, last_cause)
            SELECT e.id, %(location)s, 0, 100, false, %(now)s::timestamptz - interval '30 days',
                   %(now)s::timestamptz - interval '30 days', %(now)s, true, 35, ''
            FROM scans_endpoint AS e
        """, {"location": LOCATION, "now": now})


def _make_teams(sizes: list[int], base_url: str) -> None:
    """The teams (each with its owner), their endpoints, and the big team's member, token and
    public status page listing all its endpoints."""
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from accounts import teams
    from accounts.models import Membership, Role
    from scans.models import Endpoint, StatusPage, StatusPageEndpoint

    User = get_user_model()
    User.objects.bulk_create(  # no password hashing: the bench logs in with force_login
        [User(username=f"{TEAM_PREFIX}owner-{i}", email=f"owner-{i}@example.test",
              password="!") for i in range(len(sizes))]
        + [User(username=f"{TEAM_PREFIX}member", email="member@example.test", password="!")])
    owners = {u.username: u for u in User.objects.filter(username__startswith=TEAM_PREFIX)}
    now = timezone.now()
    made = 0
    for i, size in enumerate(sizes):
        team = teams.create_team(f"{TEAM_PREFIX}{i}", f"Bench team {i}",
                                 owner=owners[f"{TEAM_PREFIX}owner-{i}"])
        Endpoint.dangerously_unscoped.bulk_create(
            [Endpoint(team=team, name=f"endpoint {made + j}", base_url=base_url, model="m",
                      levels=[1, 4, 16], next_scan_at=now + timedelta(minutes=(made + j) % 60),
                      next_probe_at=now + timedelta(seconds=(made + j) % 60))
             for j in range(size)], batch_size=2000)
        made += size
        if i == 0:
            Membership.dangerously_unscoped.create(
                team=team, user=owners[f"{TEAM_PREFIX}member"], role=Role.MEMBER)
            page = StatusPage.objects.for_team(team).create(
                team=team, enabled=True, slug=f"{TEAM_PREFIX}status", title="Bench status")
            StatusPageEndpoint.objects.for_team(team).bulk_create(
                StatusPageEndpoint(status_page=page, endpoint=e, display_name=e.name,
                                   position=k)
                for k, e in enumerate(Endpoint.objects.for_team(team).order_by("pk")))


def build(args, report: dict) -> dict:
    """Build the site's rows; returns what was built and how long each part took."""
    from django.core.cache import cache
    from django.db import connection
    from django.utils import timezone

    from scans.history import rollups

    took: dict[str, float] = {}

    def timed(name, fn, *a):
        started = time.monotonic()
        out = fn(*a)
        took[name] = round(time.monotonic() - started, 1)
        print(f"  built {name} in {took[name]:,.0f} s", flush=True)
        return out

    cache.clear()  # the status page and the dashboards are cached
    now = timezone.now()
    timed("teams and endpoints", _make_teams,
          _team_sizes(args.endpoints, args.teams, args.big_team),
          report["target"]["base_url"])
    timed("scans", _insert_scans, report, args.days, now)
    timed("check results", _insert_check_results, report)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE scans_scan; ANALYZE scans_checkresult; ANALYZE scans_endpoint")
    timed("rollups (the real pass)", lambda: rollups.roll_up(budget_s=float("inf"), now=now))
    timed("rollups (repeated back)", _repeat_rollups, args.days, args.rollup_days, now)
    timed("liveness", _insert_liveness, args.rollup_days, now)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    return took


def _built() -> bool:
    from scans.models import Scan

    return Scan.dangerously_unscoped.filter(endpoint__team__slug=f"{TEAM_PREFIX}0").exists()


def _empty() -> None:
    """Every team-owned row of the scratch database (its teams, users and what hangs off them)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("""SELECT string_agg(quote_ident(tablename), ', ') FROM pg_tables
                          WHERE schemaname = 'public' AND tablename <> 'django_migrations'
                          AND tablename NOT LIKE 'django_content_type'
                          AND tablename NOT LIKE 'auth_permission'""")
        tables = cursor.fetchone()[0]
        cursor.execute(f"TRUNCATE {tables} CASCADE")  # noqa: S608 - names from the catalog


# --- measure -------------------------------------------------------------------------------

def _table_sizes() -> dict[str, dict[str, int]]:
    from django.db import connection

    tables = ("scans_scan", "scans_checkresult", "scans_scanrollup", "scans_checkrollup",
              "scans_proberesult", "scans_probehour")
    sizes = {}
    with connection.cursor() as cursor:
        for table in tables:
            # a partitioned table's size is its partitions' (pg_partition_tree has no row
            # for a plain table)
            sql = (f"SELECT COALESCE((SELECT sum(pg_total_relation_size(relid))::bigint FROM "  # noqa: S608
                   f"pg_partition_tree(%s)), pg_total_relation_size(%s)), "
                   f"(SELECT count(*) FROM {table})")
            cursor.execute(sql, [table, table])  # our own table names
            total, rows = cursor.fetchone()
            sizes[table] = {"bytes": total, "rows": rows}
        cursor.execute("SELECT pg_database_size(current_database())")
        sizes["database"] = {"bytes": cursor.fetchone()[0], "rows": 0}
    return sizes


def endpoint_year(report: dict, sizes: dict, endpoints: int, rollup_days: int) -> dict:
    """Bytes one endpoint keeps for a year at the default intervals and retention: the
    measured bytes a row of each table (indexes and TOAST included) times the rows a year
    keeps. A scan's full report is measured in place; its summary is stored once, here, as
    the pruning pass would store it, and measured the same way."""
    from django.conf import settings
    from django.db import connection

    from scans.history.retention import summary_of
    from scans.models import Endpoint
    from scans.models.endpoints import DEFAULT_PROBE_INTERVAL_S

    interval_min = Endpoint._meta.get_field("interval_minutes").default
    with connection.cursor() as cursor:
        cursor.execute("SELECT avg(pg_column_size(report)) FILTER (WHERE report_pruned_at IS "
                       "NULL), sum(pg_column_size(report)) FROM scans_scan")
        full_report, report_total = (float(v) for v in cursor.fetchone())
        cursor.execute("CREATE TEMP TABLE summary_probe (report jsonb)")
        cursor.execute("INSERT INTO summary_probe VALUES (%s::jsonb)",
                       [json.dumps(summary_of(report))])
        cursor.execute("SELECT pg_column_size(report) FROM summary_probe")
        summary_report = float(cursor.fetchone()[0])
        cursor.execute("DROP TABLE summary_probe")
    per_row = {t: s["bytes"] / max(s["rows"], 1) for t, s in sizes.items()}
    scan_row = (sizes["scans_scan"]["bytes"] - report_total) / max(sizes["scans_scan"]["rows"], 1)
    per_endpoint_day = {t: sizes[t]["rows"] / endpoints / rollup_days
                        for t in ("scans_scanrollup", "scans_checkrollup", "scans_probehour")}
    # Rollup rows a year keeps: daily ones for good, hourly ones HOURLY_ROLLUP_RETENTION_DAYS.
    # Counted from the hours of the last days kept: the retention pass may have run already.
    rollup_rows_a_year = {}
    hour_days = min(settings.HOURLY_ROLLUP_RETENTION_DAYS, rollup_days, 365)
    with connection.cursor() as cursor:
        for table in ("scans_scanrollup", "scans_checkrollup"):
            cursor.execute(f"SELECT count(*) FILTER (WHERE period = 'hour' AND bucket_start >= "  # noqa: S608
                           f"now() - %s * interval '1 day'), "
                           f"count(*) FILTER (WHERE period = 'day') FROM {table}", [hour_days])
            hours_kept, days = cursor.fetchone()
            rollup_rows_a_year[table] = (hours_kept + days * 365 / rollup_days) / endpoints
    checks = len(report["checks"])

    def parts(interval_min: int) -> dict[str, float]:
        year_scans = min(settings.SCAN_RETENTION_DAYS, 365) * 1440 / interval_min
        full_scans = min(settings.REPORT_RETENTION_DAYS, settings.SCAN_RETENTION_DAYS,
                         365) * 1440 / interval_min
        return {
            "scans (row and indexes)": year_scans * scan_row,
            "full reports": full_scans * full_report,
            "report summaries": (year_scans - full_scans) * summary_report,
            "check results": year_scans * checks * per_row["scans_checkresult"],
            # an hour's rollup rows do not grow with the scans in it
            "scan rollups": rollup_rows_a_year["scans_scanrollup"] * per_row["scans_scanrollup"],
            "check rollups": rollup_rows_a_year["scans_checkrollup"]
            * per_row["scans_checkrollup"],
            "probe results": settings.PROBE_RETENTION_DAYS * 86400 / DEFAULT_PROBE_INTERVAL_S
            * per_row["scans_proberesult"],
            "probe hours": 365 * per_endpoint_day["scans_probehour"]
            * per_row["scans_probehour"],
        }

    default, fast = parts(interval_min), parts(5)
    return {
        "mb": sum(default.values()) / 1e6,
        "mb_without_full_reports": (sum(default.values()) - default["full reports"]
                                    + default["full reports"] / full_report
                                    * summary_report) / 1e6,
        "mb_at_5_min_scans": sum(fast.values()) / 1e6,
        "interval_minutes": interval_min,
        "parts_mb": {k: round(v / 1e6, 2) for k, v in default.items()},
        "parts_mb_at_5_min_scans": {k: round(v / 1e6, 2) for k, v in fast.items()},
        "assumes": f"a scan every {interval_min} min (the default; also 5 min), a probe every "
                   f"{DEFAULT_PROBE_INTERVAL_S} s from one location, scans "
                   f"{settings.SCAN_RETENTION_DAYS} days, full reports "
                   f"{settings.REPORT_RETENTION_DAYS} days then summaries, probe rows "
                   f"{settings.PROBE_RETENTION_DAYS} days, {checks} checks a scan, hourly "
                   f"rollups {settings.HOURLY_ROLLUP_RETENTION_DAYS} days, daily rollups and "
                   f"probe hours a year",
        "bytes_per_row": {"full report": round(full_report), "report summary":
                          round(summary_report), "scan without report": round(scan_row),
                          **{t: round(per_row[t]) for t in per_row if t != "database"}},
    }


def _timings(get, url: str, runs: int, **headers) -> dict:
    from scans.grader import percentile

    status = get(url, **headers).status_code  # warm: the first request fills the caches
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        get(url, **headers)
        samples.append((time.perf_counter() - started) * 1000)
    return {"url": url, "status": status, "runs": runs,
            "p50_ms": round(percentile(samples, 50), 1),
            "p99_ms": round(percentile(samples, 99), 1)}


def measure_pages(runs: int) -> dict:
    """The big team's pages as its member (and its read-only token) sees them."""
    from django.contrib.auth import get_user_model
    from django.test import Client
    from django.urls import reverse

    from accounts import teams
    from accounts.models import Team
    from scans.models import Endpoint

    team = Team.dangerously_unscoped.get(slug=f"{TEAM_PREFIX}0")
    member = get_user_model().objects.get(username=f"{TEAM_PREFIX}member")
    endpoint = Endpoint.objects.for_team(team).order_by("pk").first()
    token = teams.issue_token(team, "read-only", name="bench-history")[1]
    client = Client()
    client.force_login(member)
    bearer = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    return {
        "dashboard": _timings(client.get, reverse("team-dashboard", kwargs={"slug": team.slug}),
                              runs),
        "endpoint page": _timings(client.get, reverse(
            "endpoint-detail", kwargs={"public_id": endpoint.public_id}), runs),
        "API endpoint list": _timings(client.get, reverse("api-endpoint-list"), runs, **bearer),
        "status page": _timings(Client().get, f"/status/{TEAM_PREFIX}status/", runs),
        "API metrics": _timings(client.get, reverse("api-metrics"), runs, **bearer),
    }


def _store_some(scan_ids: list[int], report: dict, start, done) -> None:
    """A worker process: store each scan's report through the worker's store path."""
    from django.db import connections

    from scans.running.worker import store_report
    from scans.system_wide import ALL_SCANS

    connections.close_all()  # this process's own connection, not the parent's
    start.wait()
    for scan_id in scan_ids:
        store_report(ALL_SCANS.select_related("endpoint").get(pk=scan_id), report)
    done.put(len(scan_ids))


def measure_store(report: dict, scans: int, procs: int) -> dict:
    """Scans stored per second: `scans` running scans spread over the site's endpoints, each
    finished by store_report (redaction, the row's columns, its check rows, the alerts'
    evaluation) in `procs` processes at once."""
    from django.db import connections
    from django.utils import timezone

    from scans.models import Endpoint, Scan, ScanStatus, ScanTrigger

    ids = list(Endpoint.dangerously_unscoped.order_by("?").values_list("pk", flat=True)[:scans])
    now = timezone.now()
    made = Scan.dangerously_unscoped.bulk_create(
        Scan(endpoint_id=ids[i % len(ids)], trigger=ScanTrigger.MANUAL, location=LOCATION,
             status=ScanStatus.RUNNING, started_at=now, heartbeat_at=now,
             deadline_at=now + timedelta(hours=1))
        for i in range(scans))
    scan_ids = [s.pk for s in made]
    connections.close_all()
    context = multiprocessing.get_context("fork")
    start, done = context.Event(), context.Queue()
    workers = [context.Process(target=_store_some, args=(scan_ids[i::procs], report, start, done))
               for i in range(procs)]
    for w in workers:
        w.start()
    time.sleep(1)  # every process imported and connected
    started = time.perf_counter()
    start.set()
    stored = sum(done.get() for _ in workers)
    seconds = time.perf_counter() - started
    for w in workers:
        w.join()
    succeeded = Scan.dangerously_unscoped.filter(pk__in=scan_ids,
                                                 status=ScanStatus.SUCCEEDED).count()
    return {"scans": stored, "succeeded": succeeded, "processes": procs,
            "seconds": round(seconds, 2), "per_s": round(stored / seconds, 1)}


def measure_retention(days: int) -> dict:
    """The hourly retention task as the beat runs it (this data set: a UTC day of probe rows
    wholly past PROBE_RETENTION_DAYS, one partition to drop), then a pruning pass over the
    oldest day of full reports (the data set holds none past REPORT_RETENTION_DAYS) for its
    rate per scan."""
    from scans import tasks
    from scans.history import retention

    started = time.monotonic()
    said = tasks.prune_reports()
    task_s = time.monotonic() - started
    pruned = retention.prune(budget_s=float("inf"), days=max(days - 1, 1))
    return {"task_s": round(task_s, 2), "task_said": said, "day_of_reports": {
        "scans": pruned.scans, "seconds": round(pruned.seconds, 2),
        "ms_per_scan": round(pruned.seconds / max(pruned.scans, 1) * 1000, 2)}}


# --- report --------------------------------------------------------------------------------

def _met(name: str, value: float) -> bool:
    op, bound = GOALS[name]
    return {">=": value >= bound, "<": value < bound, "<=": value <= bound}[op]


def _lines(result: dict) -> list[str]:
    """One line a figure, at most 80 columns."""
    def mark(ok: bool) -> str:
        return "ok  " if ok else "MISS"

    store = result["scans_stored"]
    size = result["endpoint_year"]
    lines = [f"site: {result['site']['endpoints']:,} endpoints, {result['site']['teams']} "
             f"teams, {result['site']['scans']:,} scans, db "
             f"{result['site']['database_mb']:,.0f} MB",
             f"{mark(store['meets_goal'])} stored {store['per_s']:.1f} scans/s "
             f"({store['scans']} in {store['seconds']} s, {store['processes']} processes; "
             f"goal >= 100)"]
    for name, page in result["pages"].items():
        lines.append(f"{mark(page['meets_goal'])} {name:18} p50 {page['p50_ms']:7.1f} ms  "
                     f"p99 {page['p99_ms']:7.1f} ms  (HTTP {page['status']}; goal < 300)")
    ret = result["retention"]
    lines.append(f"     retention task {ret['task_s']:.1f} s; a day of full reports: "
                 f"{ret['day_of_reports']['ms_per_scan']:.2f} ms a scan")
    lines.append(f"{mark(size['meets_goal'])} {size['mb']:,.1f} MB per endpoint-year at "
                 f"{size['interval_minutes']}-min scans (goal <= 5)")
    lines.append(f"     {size['mb_without_full_reports']:,.1f} MB without full reports; "
                 f"{size['mb_at_5_min_scans']:,.1f} MB at 5-min scans")
    lines.append(f"     load average {result['machine']['load_before'][0]:.2f} before, "
                 f"{result['machine']['load_after'][0]:.2f} after; "
                 f"{result['machine']['cpus']} CPUs")
    return lines


def run(args) -> dict:
    """Build (if needed) and measure; the result as a dict (also printed)."""
    import django

    django.setup()
    _ensure_database()
    from django.conf import settings
    from django.core.management import call_command

    # As the tests do: static files served as they are (no collectstatic), DEBUG off.
    settings.STORAGES = {**settings.STORAGES, "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}}
    call_command("migrate", verbosity=0)
    load_before = os.getloadavg()
    report = _real_report(args.report)
    took = {}
    if args.rebuild or not _built():
        _empty()
        print(f"building {args.endpoints:,} endpoints, {args.days} days of scans, "
              f"{args.rollup_days} days of rollups", flush=True)
        took = build(args, report)
    from accounts.models import Team
    from scans.models import Endpoint

    endpoints = Endpoint.dangerously_unscoped.count()
    teams = Team.dangerously_unscoped.filter(slug__startswith=TEAM_PREFIX).count()
    sizes = _table_sizes()
    year = endpoint_year(report, sizes, endpoints, args.rollup_days)
    year["meets_goal"] = _met("mb_per_endpoint_year", year["mb"])
    year["goal"] = "<= 5 MB"
    pages = measure_pages(args.runs)
    for page in pages.values():
        page["meets_goal"] = _met("page_p99_ms", page["p99_ms"]) and page["status"] == 200
        page["goal"] = "p99 < 300 ms"
    store = measure_store(report, args.store_scans, args.store_procs)
    store["meets_goal"] = _met("scans_stored_per_s", store["per_s"])
    store["goal"] = ">= 100 scans/s"
    retention = measure_retention(args.days)
    result = {
        "site": {"endpoints": endpoints, "teams": teams, "days": args.days,
                 "rollup_days": args.rollup_days, "scans": sizes["scans_scan"]["rows"],
                 "report_json_bytes": len(json.dumps(report)),
                 "database_mb": round(sizes["database"]["bytes"] / 1e6, 1),
                 "tables": {t: {"rows": s["rows"], "mb": round(s["bytes"] / 1e6, 1)}
                            for t, s in sizes.items() if t != "database"},
                 "build_s": took},
        "scans_stored": store,
        "pages": pages,
        "retention": retention,
        "endpoint_year": year,
        "machine": {"cpus": os.cpu_count(), "load_before": load_before,
                    "load_after": os.getloadavg()},
    }
    result["meets_goals"] = (store["meets_goal"] and year["meets_goal"]
                             and all(p["meets_goal"] for p in pages.values()))
    print("\n".join(_lines(result)))
    text = json.dumps(result, indent=1, default=str)
    print(text)
    if args.json_out:
        Path(args.json_out).write_text(text)
    return result


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--endpoints", type=int, default=10_000)
    p.add_argument("--teams", type=int, default=500)
    p.add_argument("--big-team", type=int, default=200,
                   help="endpoints of the team whose pages are timed")
    p.add_argument("--days", type=int, default=30, help="days of scans")
    p.add_argument("--rollup-days", type=int, default=365, help="days of rollups and probe hours")
    p.add_argument("--rebuild", action="store_true", help="empty the database and build again")
    p.add_argument("--report", help="a real report.json (default: scan tokvera target)")
    p.add_argument("--runs", type=int, default=30, help="timed requests a page (after one warm)")
    p.add_argument("--store-scans", type=int, default=600)
    p.add_argument("--store-procs", type=int, default=4,
                   help="processes storing at once (worker processes of a site)")
    p.add_argument("--json-out", help="also write the JSON object to this file")
    return p


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    if args.endpoints < 1 or args.teams < 1 or args.days < 1 or args.rollup_days < args.days:
        raise SystemExit("--endpoints, --teams and --days must be at least 1, and "
                         "--rollup-days at least --days")
    run(args)


if __name__ == "__main__":
    main()
