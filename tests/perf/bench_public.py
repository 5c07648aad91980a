"""Scale benchmark for the public benchmarks. Not collected by pytest; run by hand:

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/tokvera_bench_public \\
    CACHE_URL=redis://127.0.0.1:6379/15 \\
        .venv/bin/python tests/perf/bench_public.py [--hosts 10000 --jobs 5000000 --days 30] [--rebuild]

Builds (once; --rebuild to redo) 10,000 hosts (about 82 % online, every trust tier, 1-4 of 20
catalog models each, EWMAs, GPUs) and 5 million jobs over 30 days (94 % completed, 6 % failed, a
few unsettled, with request and result bodies), the jobs with COPY. Then it prints:

- the time to build the snapshot (first run and the median of several), and its memory
  (tracemalloc peak and the growth of the process's peak RSS);
- the median time of a cached /benchmarks, /v1/slo and /v1/stats through Django's full
  middleware stack (the site's cache: Redis when CACHE_URL says so);
- EXPLAIN (ANALYZE, BUFFERS) of the job-window query and the per-tier host query.

The hosts' heartbeats are stamped again at the start of every measurement, so "online" means
the same whenever the script runs; the jobs keep the times they were built with.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import random
import resource
import statistics
import sys
import time
import tracemalloc
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tokvera_site.settings")
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/tokvera_bench_public")
os.environ.setdefault("ALLOWED_HOSTS", "testserver,127.0.0.1")

MODELS = 20
GPUS = ["RTX 4090", "RTX 3090", "RTX 4080", "RTX 3060 12GB", "A100 80GB", "H100 80GB", "L40S",
        "RX 7900 XTX", "M2 Ultra", "M3 Max", "RTX A6000", "RTX 4070 Ti", ""]
REQUEST = json.dumps({"messages": [{"role": "system", "content": "You are a helpful assistant."},
                                   {"role": "user", "content": "Summarise the following note in "
                                    "three sentences, keeping every number exact."}],
                      "max_tokens": 256})
RESULT = json.dumps({"content": "The note says the quarterly volume rose while costs held flat; "
                                "two regions missed their targets and one beat it by a wide margin.",
                     "finish_reason": "stop"})


def _ensure_database() -> None:
    import psycopg

    url = os.environ["DATABASE_URL"]
    name = url.rsplit("/", 1)[1]
    with psycopg.connect(url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname=%s", [name]).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')


def _median_ms(fn, runs: int) -> tuple[float, float]:
    fn()  # warm
    samples = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1000)
    samples.sort()
    return statistics.median(samples), samples[max(0, math.ceil(0.95 * len(samples)) - 1)]


def _ts(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat()


def build(hosts: int, jobs: int, days: int, rebuild: bool) -> None:
    from django.db import connection
    from django.test import override_settings

    from accounts import teams
    from benchmarks.models import CatalogModel, Host, Job
    from tests.conftest import make_user

    if Job.dangerously_unscoped.exists() and not rebuild:
        return
    with connection.cursor() as cur:
        cur.execute("TRUNCATE benchmarks_job, benchmarks_host_catalog_models, benchmarks_host, "
                    "benchmarks_catalogmodel, benchmarks_auditentry CASCADE")
    rng = random.Random(6)
    now = datetime.now(UTC)
    t0 = time.perf_counter()

    from accounts.models import Team
    owner = make_user(f"bench-{uuid.uuid4().hex[:6]}")
    with override_settings(TEAMS_PER_ACCOUNT=150):  # one bench account owns every team
        operators = [Team.dangerously_unscoped.filter(slug=f"bench-ops-{i}").first()
                     or teams.create_team(f"bench-ops-{i}", f"Bench ops {i}", owner=owner)
                     for i in range(100)]
        buyers = [Team.dangerously_unscoped.filter(slug=f"bench-buyer-{i}").first()
                  or teams.create_team(f"bench-buyer-{i}", f"Bench buyer {i}", owner=owner)
                  for i in range(50)]
    catalog = [CatalogModel(id=f"model-{i:02d}-q4", display_name=f"Model {i:02d}", quant="Q4_K_M",
                            context_len=8192 * (1 + i % 4)) for i in range(MODELS)]
    catalog += [CatalogModel(id=f"retired-{i}", display_name=f"Retired {i}", quant="Q8_0",
                             context_len=4096, active=False) for i in range(2)]
    CatalogModel.objects.bulk_create(catalog)
    model_ids = [m.id for m in catalog[:MODELS]]
    weights = [1 / (i + 1) for i in range(MODELS)]  # a few popular models, a long tail

    rows = []
    for i in range(hosts):
        roll = rng.random()
        state = "on" if roll < 0.82 else "off" if roll < 0.92 else "never" if roll < 0.97 else "susp"
        seen = {"on": now - timedelta(seconds=rng.uniform(0, 40)),
                "off": now - timedelta(minutes=rng.uniform(1, 600)), "never": None,
                "susp": now - timedelta(seconds=rng.uniform(0, 40))}[state]
        trust = rng.choices(["none", "software", "edr"], [50, 35, 15])[0]
        has_ewma = state != "never" and rng.random() < 0.9
        advertised = sorted(set(rng.choices(model_ids, weights, k=rng.randint(1, 4))))
        rows.append(Host(
            team=operators[i % len(operators)], name=f"bench-host-{i}-{state}", trust_level=trust,
            token_prefix=f"tkh_{i:08d}", token_hmac="0" * 64, suspended=state == "susp",
            last_heartbeat_at=seen, slots=rng.randint(1, 4), advertised=advertised,
            gpu_model=rng.choice(GPUS), reputation=rng.uniform(0.3, 1.0),
            ttft_ewma_ms=rng.lognormvariate(5.7, 0.6) if has_ewma else None,
            tps_ewma=rng.uniform(8, 140) if has_ewma else None))
    Host.dangerously_unscoped.bulk_create(rows, batch_size=2000)
    through = Host.catalog_models.through
    host_ids = []
    pairs = []
    for host_id, advertised in Host.dangerously_unscoped.values_list("id", "advertised"):
        host_ids.append(host_id)
        pairs += [through(host_id=host_id, catalogmodel_id=m) for m in advertised]
    through.objects.bulk_create(pairs, batch_size=5000)
    print(f"built {hosts:,} hosts and {len(pairs):,} advertised models in {time.perf_counter() - t0:.1f} s")

    t0 = time.perf_counter()
    cols = ("id, team_id, model_id, status, host_id, max_tokens, request_json, result_json, "
            "created_at, queued_at, leased_at, delivered_at, lease_expires_at, started_at, "
            "completed_at, settled_at, folded_at, ttft_ms, completion_tokens, elapsed_ms, "
            "attempts, tried_hosts, failure_reason")
    end = now.timestamp() - 60
    start = end - days * 86400
    buyer_ids = [t.pk for t in buyers]
    random_ = rng.random
    uniform = rng.uniform
    lognorm = rng.lognormvariate
    choice = rng.choice
    models_k = rng.choices(model_ids, weights, k=jobs)
    unsettled = min(1000, jobs // 100)
    with connection.cursor() as cursor:
        raw = cursor.connection
        with raw.cursor() as cur, cur.copy(f"COPY benchmarks_job ({cols}) FROM STDIN") as copy:
            buf = io.StringIO()
            for n in range(jobs):
                created = uniform(start, end)
                host = choice(host_ids)
                team = choice(buyer_ids)
                if n < unsettled:  # the last few minutes: still queued, leased or running
                    created = end - uniform(0, 120)
                    status = ("queued", "leased", "running")[n % 3]
                    c = _ts(created)
                    hid = "\\N" if status == "queued" else str(host)
                    leased = "\\N" if status == "queued" else c
                    buf.write(f"{uuid.uuid4()}\t{team}\t{models_k[n]}\t{status}\t{hid}\t256\t{REQUEST}\t"
                              f"\\N\t{c}\t{c}\t{leased}\t\\N\t\\N\t\\N\t\\N\t\\N\t\\N\t\\N\t\\N\t\\N\t"
                              f"0\t[]\t\n")
                    continue
                latency = lognorm(7.3, 0.8)  # ms; median about 1.5 s
                c = _ts(created)
                settled = _ts(created + latency / 1000)
                if random_() < 0.94:
                    tokens = 0 if random_() < 0.03 else int(uniform(20, 256))
                    ttft = min(latency, lognorm(5.7, 0.6))
                    buf.write(f"{uuid.uuid4()}\t{team}\t{models_k[n]}\tcompleted\t{host}\t256\t{REQUEST}\t"
                              f"{RESULT}\t{c}\t{c}\t{c}\t{c}\t\\N\t{c}\t{settled}\t{settled}\t{settled}\t"
                              f"{ttft:.1f}\t{tokens}\t{latency:.1f}\t1\t[]\t\n")
                else:
                    hid = str(host) if random_() < 0.7 else "\\N"
                    reason = "host: cannot load quant" if hid != "\\N" else "no_host"
                    buf.write(f"{uuid.uuid4()}\t{team}\t{models_k[n]}\tfailed\t{hid}\t256\t{REQUEST}\t"
                              f"\\N\t{c}\t{c}\t\\N\t\\N\t\\N\t\\N\t\\N\t{settled}\t{settled}\t"
                              f"\\N\t\\N\t\\N\t1\t[]\t{reason}\n")
                if n % 50_000 == 49_999:
                    copy.write(buf.getvalue())
                    buf = io.StringIO()
            copy.write(buf.getvalue())
    with connection.cursor() as cur:
        cur.execute("ANALYZE benchmarks_job; ANALYZE benchmarks_host; ANALYZE benchmarks_host_catalog_models")
    print(f"built {jobs:,} jobs over {days} days with COPY in {time.perf_counter() - t0:.0f} s")


def _vacuum() -> None:
    import psycopg

    with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE benchmarks_job")


def _explain(sql: str, params, settings=()) -> str:
    from django.db import connection, transaction

    with transaction.atomic(), connection.cursor() as cur:
        for setting in settings:
            cur.execute(setting)
        cur.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, params)
        return "\n  ".join(r[0] for r in cur.fetchall())


def measure(runs: int, verbose: bool, http: bool) -> None:
    from django.core.cache import cache
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone

    from benchmarks.models import Host, Job
    from benchmarks.public import cache as public_cache
    from benchmarks.public import snapshot

    with connection.cursor() as cur:
        cur.execute("UPDATE benchmarks_host SET last_heartbeat_at = now() - random() * interval '40 seconds' "
                    "WHERE name LIKE '%%-on' OR name LIKE '%%-susp'")
        cur.execute("SELECT pg_size_pretty(pg_total_relation_size('benchmarks_job')), "
                    "pg_size_pretty(pg_database_size(current_database()))")
        job_size, db_size = cur.fetchone()
        cur.execute("SELECT min(settled_at), max(settled_at) FROM benchmarks_job")
        first, last = cur.fetchone()
    jobs = Job.dangerously_unscoped.count()
    print(f"jobs: {jobs:,} (settled {first:%Y-%m-%d %H:%M} .. {last:%Y-%m-%d %H:%M}), "
          f"job table with indexes: {job_size}, database: {db_size}")
    print(f"hosts: {Host.dangerously_unscoped.count():,}, online now: "
          f"{Host.dangerously_unscoped.filter(Host.online_q()).count():,}")

    now = timezone.now()
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    tracemalloc.start()
    t0 = time.perf_counter()
    built = snapshot.build_snapshot(now)
    first_ms = (time.perf_counter() - t0) * 1000
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rss_growth = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before
    median, p95 = _median_ms(lambda: snapshot.build_snapshot(now), runs)
    with CaptureQueriesContext(connection) as queries:
        snapshot.build_snapshot(now)
    print(f"snapshot build: first {first_ms:.0f} ms, median {median:.0f} ms (p95 {p95:.0f} ms, "
          f"{runs} runs), {len(queries.captured_queries)} queries; tracemalloc peak "
          f"{peak / 2**20:.1f} MiB, peak RSS growth {rss_growth / 1024:.1f} MiB")
    alpha = built["models"][0]
    print(f"  {len(built['models'])} models, {built['online_hosts']:,} online hosts; {alpha['id']}: "
          f"7d {alpha['windows']['7d']}, online {alpha['online_hosts']}")

    print(f"cache backend: {cache.__class__.__name__}")
    public_cache.refresh()
    client = Client()
    sizes = {}
    for url in ("/benchmarks", "/v1/slo", "/v1/stats"):
        response = client.get(url)
        assert response.status_code == 200
        sizes[url] = len(response.content)
        with CaptureQueriesContext(connection) as queries:
            med, p95 = _median_ms(lambda u=url: client.get(u), 300)
        print(f"cached {url}: median {med:.2f} ms, p95 {p95:.2f} ms ({sizes[url]:,} bytes, "
              f"{len(queries.captured_queries)} queries in {301} requests)")

    if http:
        _measure_http()

    sql, params = snapshot.job_windows_query([m["id"] for m in built["models"]], now)
    plan = _explain(sql, params, snapshot.JOB_WINDOWS_SETTINGS)
    if not verbose:  # one branch per model: show the first two, then the summary lines
        lines = plan.split("\n  ")
        branches = [i for i, line in enumerate(lines) if "Subquery Scan" in line or "GroupAggregate" in line]
        keep = lines[:branches[2]] + ["  ... (one such branch per model)"] + [
            line for line in lines if line.startswith(("Planning", "Execution", "JIT"))]
        plan = "\n  ".join(keep) if len(branches) > 2 else plan
    print("job windows query plan:\n  " + plan)
    tiers_sql = _captured_sql(lambda: snapshot._tiers_sql([m["id"] for m in built["models"]], now))
    print("per-tier host query plan:\n  " + _explain(*tiers_sql))


def _measure_http() -> None:
    """The same cached answers through a real server: gunicorn (one sync worker) on loopback,
    one keep-alive client, after the snapshot above was stored in the site's cache."""
    import socket
    import subprocess

    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "tokvera_site.wsgi", "--bind", f"127.0.0.1:{port}",
         "--workers", "1", "--log-level", "warning"], cwd=ROOT, env=os.environ.copy())
    try:
        base = f"http://127.0.0.1:{port}"
        with httpx.Client(base_url=base, timeout=10) as client:
            for _ in range(100):
                try:
                    client.get("/healthz")
                    break
                except httpx.TransportError:
                    time.sleep(0.1)
            for url in ("/benchmarks", "/v1/slo", "/v1/stats"):
                assert client.get(url).status_code == 200
                med, p95 = _median_ms(lambda u=url: client.get(u), 300)
                print(f"cached {url} over HTTP (gunicorn, loopback): median {med:.2f} ms, p95 {p95:.2f} ms")
    finally:
        server.terminate()
        server.wait(timeout=10)


def _captured_sql(fn):
    """The SQL and parameters fn sends (the last statement), to EXPLAIN exactly that."""
    from django.db import connection

    seen = []
    def wrapper(execute, sql, params, many, context):
        seen.append((sql, params))
        return execute(sql, params, many, context)
    with connection.execute_wrapper(wrapper):
        fn()
    return seen[-1]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hosts", type=int, default=10_000)
    parser.add_argument("--jobs", type=int, default=5_000_000)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--rebuild", action="store_true")
    parser.add_argument("--verbose", action="store_true", help="print every branch of the plan")
    parser.add_argument("--no-http", action="store_true",
                        help="skip the timings through gunicorn on loopback")
    args = parser.parse_args()
    _ensure_database()
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    call_command("collectstatic", interactive=False, verbosity=0)  # the manifest the page links to
    built = False
    from benchmarks.models import Job
    if args.rebuild or not Job.dangerously_unscoped.exists():
        build(args.hosts, args.jobs, args.days, rebuild=True)
        built = True
    if built:
        _vacuum()
    measure(args.runs, args.verbose, not args.no_http)


if __name__ == "__main__":
    main()
