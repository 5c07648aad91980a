"""Network coordinator benchmark (issues 5 and 14). Not a test: run it by hand.

    .venv/bin/python tests/perf/bench_network.py [--workers 4] [--seconds 20] [--hosts 10000]

Needs PostgreSQL at postgres://postgres@127.0.0.1:5432 (trust auth), its `pgbench`, and Redis at
127.0.0.1:6379. It (re)creates the databases `tokvera_bench` (or $BENCH_DB) and its `_pgbench`,
migrates the first, seeds hosts and a buyer, starts gunicorn (sync workers, or gthread with
--threads) and Celery workers of one thread each for folds and for assignment passes
(--celery shared: one worker of two threads for both) on Redis,
then measures, with a raw asyncio HTTP client on uvloop, on 127.0.0.1:

0. pgbench's single-row UPDATE (`UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE
   aid = :aid`, 32 clients) on the same PostgreSQL, in the same run: the yardstick.
1. Heartbeats from `--hosts` simulated hosts (steady state: each host already advertised its
   models once), sent to the heartbeat server (`--heartbeat-server uvicorn`, the default:
   tokvera_site.heartbeats_asgi on --port + 1, as docs/operations.md deploys it) or to the web
   (`web`: gunicorn's fast path): the most heartbeats/s it sustains with 32 callers, then a
   fixed-rate (open-loop) run at 1,000/s for latency p50/p99, measured from each request's
   scheduled time, so a backed-up server is counted, not hidden (each call starts when it is
   due, on a connection of its own when none is idle; not run when 1,000/s is more than
   1.25 x the maximum), and at 80 % of the maximum (the goal's rate). Phases start 3 s apart
   and each host calls at most once in 3 s (STEADY_GAP_S): a run at R/s needs more than 3 x R
   hosts, hence the default of 40,000. Goal: at least 0.25 x pgbench's rate, p99 <
   50 ms at 80 % of the maximum.
2. Jobs through submit -> complete: buyers submit (at most 400 unsettled at a time) while 100
   simulated hosts with 2 slots each lease with {"start": true, "wait_s": --lease-wait-s}
   (held by the coordinator until a pass assigns the host a job; one waiting call per host,
   as the agent does) and complete with {"lease_next": true} (the next job, when one is
   already assigned, comes back running). --lease-wait-s 0 is the old polling (a lease every
   second after a 204). Waiting calls hold a thread each under gthread: give the workers
   more threads than hosts (e.g. --workers 2 --threads 64). Reports completed jobs/s and,
   from the database, the EWMA fold latency (folded_at - completed_at). Goal: >= 200 jobs/s, folds within 5 s.
   Options for the shape that scales: --pool N (DB_POOL_MAX_SIZE: the threads share N
   connections per process, so every host can wait) with --waiting-per-process;
   --submit-batch N (POST /v1/jobs/batch); --complete-wait-s (a completion waits for the
   slot's next job instead of a new lease doing so); --complete-batch (a host's slots report
   together while a report call is in flight, POST /v1/jobs/complete); --server granian (its
   HTTP in Rust; not a dependency: pip install granian).
3. Memory of each gunicorn worker (RSS) before, between and after the phases. Goal: flat.

Percentiles are the project's nearest-rank `scans.grader.figures.percentile`. Prints one JSON
summary, then the headline figures and the machine's load average on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PG = "postgres://postgres@127.0.0.1:5432"
# A database name of its own (BENCH_DB) where several people share one PostgreSQL.
DB_NAME = os.environ.get("BENCH_DB", "tokvera_bench")
ENV = {
    **os.environ,
    "DATABASE_URL": f"{PG}/{DB_NAME}",
    # Redis database numbers of their own (override when 12/13 are someone else's).
    "CACHE_URL": os.environ.get("BENCH_CACHE_URL", "redis://127.0.0.1:6379/13"),
    "CELERY_BROKER_URL": os.environ.get("BENCH_BROKER_URL", "redis://127.0.0.1:6379/12"),
    "SECRET_KEY": "bench-network-" + "s" * 40,
    "DEBUG": "0",
    # One buyer stands in for the whole network's demand: lift its per-team submit limits.
    "NETWORK_SUBMIT_LIMIT": "1000000",
    "NETWORK_MAX_UNSETTLED_PER_TEAM": "1000000",
    # Every simulated host calls from 127.0.0.1: the 401 floor below must not block the address
    # for the phases after it (issue 19's per-address limit did, which read as a tiny floor).
    "AUTH_FAILURE_LIMIT": "1000000000",
}
PGBENCH_DB = f"{DB_NAME}_pgbench"
# A host's heartbeat is steady (one UPDATE, no cache round trip) when it comes at least
# NETWORK_HEARTBEAT_WINDOW_S / NETWORK_HEARTBEAT_LIMIT (3 s) after its last one; the agent
# sends one every 15 s. Each phase starts this long after the one before, so no host calls
# sooner than that; and a phase at R heartbeats/s needs more than 3 x R hosts (--hosts).
STEADY_GAP_S = 3.1
HB_MODEL, JOB_MODEL = "hb-q4", "bench-q4"
JOB_HOSTS, JOB_SLOTS = 100, 2


def run(coroutine):
    """A phase on a fresh event loop: uvloop's, so the load generator costs the box less."""
    import uvloop

    return uvloop.run(coroutine)


# --- a minimal HTTP/1.1 client (one connection per request: gunicorn sync workers close) ----


class Http:
    """A pool of HTTP/1.1 connections: kept alive when the server allows it (gthread workers),
    reopened when the server closes them (sync workers close after every response)."""

    def __init__(self, port: int, keep_alive: bool = True):
        self.port = port
        self.keep_alive = keep_alive
        self._idle: list[tuple] = []

    async def call(self, method: str, path: str, token: str, body: bytes = b"") -> tuple[int, bytes]:
        """(status, body); status 0 when the connection failed (counted, not raised)."""
        for attempt in (1, 2):
            conn = self._idle.pop() if self._idle and attempt == 1 else None
            fresh = conn is None
            try:
                if conn is None:
                    conn = await asyncio.open_connection("127.0.0.1", self.port)
                status, data, reusable = await self._exchange(conn, method, path, token, body)
            except (OSError, asyncio.IncompleteReadError, ValueError):
                if conn is not None:
                    conn[1].close()
                if fresh or attempt == 2:
                    return 0, b""
                continue  # a kept-alive connection the server had closed: retry on a new one
            if reusable and self.keep_alive:
                self._idle.append(conn)
            else:
                conn[1].close()
            return status, data
        return 0, b""

    async def _exchange(self, conn, method, path, token, body):
        reader, writer = conn
        head = (f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
                f"Connection: {'keep-alive' if self.keep_alive else 'close'}\r\n\r\n").encode()
        writer.write(head + body)
        await writer.drain()
        header = await reader.readuntil(b"\r\n\r\n")
        status = int(header[9:12])
        lower = header.lower()
        length = 0
        if b"content-length:" in lower:
            length = int(lower.split(b"content-length:", 1)[1].split(b"\r\n", 1)[0])
            data = await reader.readexactly(length)
        elif status in (204, 304):
            data = b""
        else:
            data = await reader.read()
            return status, data, False
        return status, data, b"connection: close" not in lower

    async def json(self, method, path, token, payload=None):
        status, body = await self.call(method, path, token,
                                       json.dumps(payload).encode() if payload is not None else b"")
        return status, (json.loads(body) if body and status in (200, 202) else None)


# --- setup -----------------------------------------------------------------------------------


def recreate_database() -> None:
    import psycopg

    with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DB_NAME} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {DB_NAME}")
    subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=ROOT,
                   env=ENV, check=True)


def pgbench_single_row_update(seconds: float, clients: int = 32) -> dict:
    """pgbench's rate of single-row UPDATEs on the same server (its own database)."""
    import re
    import tempfile

    import psycopg

    with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {PGBENCH_DB} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {PGBENCH_DB}")
    url = f"{PG}/{PGBENCH_DB}"
    subprocess.run(["pgbench", "-i", "-q", "-s", "10", url], check=True, capture_output=True)
    with tempfile.NamedTemporaryFile("w", suffix=".sql") as script:
        script.write("\\set aid random(1, 1000000)\n"
                     "UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid = :aid;\n")
        script.flush()
        out = subprocess.run(["pgbench", "-n", "-c", str(clients), "-j", "2", "-T", str(int(seconds)),
                              "-f", script.name, url], check=True, capture_output=True, text=True)
    tps = float(re.search(r"tps = ([0-9.]+)", out.stdout).group(1))
    latency = re.search(r"latency average = ([0-9.]+) ms", out.stdout)
    return {"updates_per_s": round(tps, 1), "clients": clients, "seconds": int(seconds),
            "latency_avg_ms": float(latency.group(1)) if latency else None}


def seed(hosts: int) -> dict:
    """Hosts (tokens kept in memory), catalog, a buyer token. Uses the ORM in this process."""
    os.environ.update(ENV)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tokvera_site.settings")
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.utils import timezone

    from accounts import credentials, teams
    from accounts.models import Team
    from benchmarks.models import CatalogModel, Host
    from tests.conftest import make_user

    for model_id in (HB_MODEL, JOB_MODEL):
        CatalogModel.objects.create(id=model_id, display_name=model_id, quant="Q4_K_M", context_len=4096)
    ops = teams.create_team("ops", "Ops", owner=make_user("ops-owner"))
    buyer = teams.create_team("buyer", "Buyer", owner=make_user("buyer-owner"))
    _, buyer_token = teams.issue_token(buyer, "read-write")

    def make(n, model, prefix):
        rows, tokens = [], []
        now = timezone.now()
        for i in range(n):
            new = credentials.new_secret("tkh")
            tokens.append(new.token)
            rows.append(Host(team=ops, name=f"{prefix}-{i}", token_prefix=new.prefix,
                             token_hmac=new.digest, token_issued_at=now, trust_level="software",
                             advertised=[model], slots=JOB_SLOTS if model == JOB_MODEL else 1))
        created = Host.dangerously_unscoped.bulk_create(rows, batch_size=2000)
        through = Host.catalog_models.through
        through.objects.bulk_create([through(host_id=h.pk, catalogmodel_id=model) for h in created],
                                    batch_size=5000)
        return tokens

    assert Team.dangerously_unscoped.count() == 2
    return {"hb_tokens": make(hosts, HB_MODEL, "hb"), "job_tokens": make(JOB_HOSTS, JOB_MODEL, "job"),
            "buyer_token": buyer_token}


def start_services(port: int, workers: int, threads: int, pool: int = 0,
                   waiting_per_process: int | None = None, server: str = "gunicorn",
                   celery_layout: str = "split", worker_connections: int = 1000,
                   heartbeat_port: int | None = None, heartbeat_workers: int = 1):
    worker_class = (["--worker-class", "gthread", "--threads", str(threads),
                     "--worker-connections", str(worker_connections)] if threads > 1 else [])
    web_env = {**ENV, "DB_POOL_MAX_SIZE": str(pool)}
    if waiting_per_process is not None:
        web_env["NETWORK_WAITING_LEASES_PER_PROCESS"] = str(waiting_per_process)
    command = [sys.executable, "-m", "gunicorn", "tokvera_site.wsgi", "--bind", f"127.0.0.1:{port}",
               "--workers", str(workers), *worker_class, "--backlog", "4096", "--keep-alive", "30",
               "--log-level", "warning"]
    if server == "granian":  # HTTP in Rust, the WSGI app on `threads` blocking threads
        command = [str(Path(sys.executable).parent / "granian"), "--interface", "wsgi",
                   "tokvera_site.wsgi:application", "--host", "127.0.0.1", "--port", str(port),
                   "--workers", str(workers), "--blocking-threads", str(threads),
                   "--backlog", "4096", "--log-level", "warning"]
    gunicorn = subprocess.Popen(command, cwd=ROOT, env=web_env)
    heartbeats = None
    if heartbeat_port is not None:  # the heartbeat server (docs/operations.md), on a port of its own
        heartbeats = subprocess.Popen(
            [str(Path(sys.executable).parent / "uvicorn"), "tokvera_site.heartbeats_asgi:application",
             "--host", "127.0.0.1", "--port", str(heartbeat_port), "--loop", "uvloop",
             "--http", "httptools", "--no-access-log", "--log-level", "warning",
             "--backlog", "4096", *(["--workers", str(heartbeat_workers)] if heartbeat_workers > 1 else [])],
            cwd=ROOT, env=ENV)
    # Two threads of Celery in all, so layouts compare fairly. split (production's shape,
    # docs/operations.md): folds (queue `celery`) and assignment passes (queue `passes`) in
    # worker processes of their own, one thread each; shared: one worker process, two threads,
    # serving both queues (Procfile.dev's shape, and the only one before passes had a queue).
    queues = {"split": [("celery", "1"), ("passes", "1")], "shared": [("celery,passes", "2")]}
    celery_workers = [
        subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "tokvera_site", "worker", "-Q", queue,
             "--concurrency", concurrency, "-n", f"bench{n}@%h", "--without-gossip",
             "--without-mingle", "--without-heartbeat", "-l", "WARNING"],
            cwd=ROOT, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for n, (queue, concurrency) in enumerate(queues[celery_layout])
    ]
    import httpx

    deadline = time.monotonic() + 60
    for url in [f"http://127.0.0.1:{port}/healthz",
                *([f"http://127.0.0.1:{heartbeat_port}/v1/hosts/heartbeat"] if heartbeats else [])]:
        while time.monotonic() < deadline:
            try:
                httpx.get(url, timeout=2, trust_env=False).raise_for_status()
                break
            except httpx.HTTPStatusError:
                break  # answering (the heartbeat server answers a GET 405)
            except httpx.HTTPError:
                time.sleep(0.3)
        else:
            raise SystemExit(f"{url} did not answer")
    return gunicorn, celery_workers, heartbeats


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU of these processes so far (from /proc)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def children(master: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(master)], capture_output=True, text=True)
    return [int(x) for x in out.stdout.split()]


def celery_pids(workers: list[subprocess.Popen]) -> list[int]:
    return [pid for worker in workers for pid in (worker.pid, *children(worker.pid))]


def rss_mb(pids: list[int]) -> list[float]:
    out = subprocess.run(["ps", "-o", "rss=", "-p", ",".join(map(str, pids))],
                         capture_output=True, text=True)
    return sorted(round(int(x) / 1024, 1) for x in out.stdout.split())


def worker_rss_mb(master: int) -> list[float]:
    out = subprocess.run(["ps", "-o", "rss=", "--ppid", str(master)], capture_output=True, text=True)
    return sorted(round(int(x) / 1024, 1) for x in out.stdout.split())


# --- phase 1: heartbeats ---------------------------------------------------------------------


def _hb_body() -> bytes:
    return json.dumps({"models": [HB_MODEL], "slots": 1,
                       "hardware": {"gpu_model": "RTX 4090", "vram_mb": 24576}}).encode()


async def heartbeats_closed(http: Http, tokens: list[str], seconds: float, callers: int) -> dict:
    body = _hb_body()
    statuses: dict[int, int] = {}
    latencies: list[float] = []
    stop = time.perf_counter() + seconds
    cursor = iter(range(10**9))

    async def caller():
        while time.perf_counter() < stop:
            token = tokens[next(cursor) % len(tokens)]
            t0 = time.perf_counter()
            status, _ = await http.call("POST", "/v1/hosts/heartbeat", token, body)
            if status == 200:  # a failure is no fast answer: counted in statuses, not timed
                latencies.append((time.perf_counter() - t0) * 1000)
            statuses[status] = statuses.get(status, 0) + 1

    began = time.perf_counter()
    await asyncio.gather(*(caller() for _ in range(callers)))
    elapsed = time.perf_counter() - began
    return _summary(statuses, latencies, elapsed)


async def heartbeats_open(http: Http, tokens: list[str], seconds: float, rate: float) -> dict:
    """Fixed arrival rate; latency counted from each request's scheduled time. Each request is
    started when it is due (a connection of its own when none is idle, as each host has one),
    so a server that falls behind sees more and more calls at once."""
    body = _hb_body()
    statuses: dict[int, int] = {}
    latencies: list[float] = []
    total = int(seconds * rate)
    began = time.perf_counter()
    offset = random.randrange(len(tokens))

    async def one(i: int, due: float):
        status, _ = await http.call("POST", "/v1/hosts/heartbeat", tokens[(offset + i) % len(tokens)], body)
        if status == 200:
            latencies.append((time.perf_counter() - due) * 1000)
        statuses[status] = statuses.get(status, 0) + 1

    in_flight: set[asyncio.Task] = set()
    for i in range(total):
        due = began + i / rate
        if (ahead := due - time.perf_counter()) > 0.001:
            await asyncio.sleep(ahead)
        task = asyncio.create_task(one(i, due))
        in_flight.add(task)
        task.add_done_callback(in_flight.discard)
    await asyncio.gather(*in_flight)
    return {**_summary(statuses, latencies, time.perf_counter() - began), "target_rate": rate}


async def heartbeats_while_hosts_wait(port: int, heartbeat_port: int, tokens: list[str],
                                      waiting: list[str], seconds: float, callers: int) -> dict:
    """Closed-loop heartbeats while `waiting` idle hosts each hold a waiting lease (renewed
    when it ends): what serving waiting hosts costs the busiest call."""
    stop = time.perf_counter() + seconds
    leases: dict[int, int] = {}

    async def wait_for_work(token):
        http = Http(port)  # a connection of its own, as each agent has
        while time.perf_counter() < stop:
            wait_s = round(min(25.0, max(0.0, stop - time.perf_counter())), 2)
            status, _ = await http.call("POST", "/v1/hosts/lease", token,
                                        json.dumps({"wait_s": wait_s}).encode())
            leases[status] = leases.get(status, 0) + 1
            if status != 204:
                await asyncio.sleep(1)

    waiters = [asyncio.create_task(wait_for_work(t)) for t in waiting]
    await asyncio.sleep(2)  # let them all be held
    connections = database_connections()  # PostgreSQL's, while they wait (a second's block)
    result = await heartbeats_closed(Http(heartbeat_port), tokens, max(1.0, stop - time.perf_counter()),
                                     callers)
    await asyncio.gather(*waiters)
    return {**result, "waiting_hosts": len(waiting), "lease_statuses": leases,
            "database_connections_while_waiting": connections}


def database_connections() -> int:
    import psycopg

    with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
        return conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s",
                            [DB_NAME]).fetchone()[0]


def _summary(statuses, latencies, elapsed) -> dict:
    """Served per second and the latency percentiles of the calls answered 200/202; `statuses`
    counts every answer (0: no answer, the connection failed)."""
    from scans.grader.figures import percentile

    ok = statuses.get(200, 0) + statuses.get(202, 0)
    def ms(p):
        return round(percentile(latencies, p), 1) if latencies else None

    return {"per_s": round(ok / elapsed, 1), "statuses": statuses, "seconds": round(elapsed, 1),
            "p50_ms": ms(50), "p99_ms": ms(99)}


# --- phase 2: jobs ---------------------------------------------------------------------------


async def jobs_flow(http: Http, buyer: str, host_tokens: list[str], seconds: float,
                    submitters: int = 8, max_unsettled: int = 400, poll_s: float = 1.0,
                    lease_wait_s: float = 0.0, submit_batch: int = 1,
                    complete_batch: bool = False, complete_wait_s: float = 0.0) -> dict:
    hb = json.dumps({"models": [JOB_MODEL], "slots": JOB_SLOTS}).encode()
    for token in host_tokens:
        await http.call("POST", "/v1/hosts/heartbeat", token, hb)
    submitted = completed = 0
    statuses: dict[str, dict[int, int]] = {}
    latencies: dict[str, list[float]] = {}
    stop = time.perf_counter() + seconds
    began = time.perf_counter()

    def count(kind, status, t0):
        statuses.setdefault(kind, {}).setdefault(status, 0)
        statuses[kind][status] += 1
        latencies.setdefault(kind, []).append((time.perf_counter() - t0) * 1000)

    async def submitter():
        nonlocal submitted
        one = {"model": JOB_MODEL, "max_tokens": 16, "messages": [{"role": "user", "content": "bench"}]}
        # --submit-batch above 1: POST /v1/jobs/batch with that many jobs per call
        path, body = (("/v1/jobs", json.dumps(one).encode()) if submit_batch <= 1 else
                      ("/v1/jobs/batch", json.dumps({"jobs": [one] * submit_batch}).encode()))
        while time.perf_counter() < stop:
            if submitted - completed + submit_batch > max_unsettled:
                await asyncio.sleep(0.01)
                continue
            t0 = time.perf_counter()
            status, _ = await http.call("POST", path, buyer, body)
            count("submit", status, t0)
            if status == 202:
                submitted += submit_batch

    figures = {"ttft_ms": 20.0, "completion_tokens": 16, "elapsed_ms": 80.0,
               "result": {"content": "x" * 64}}
    done = json.dumps({**figures, "lease_next": True}).encode()

    def done_waiting() -> bytes:  # wait for the next job in the completion (never past the run)
        left = round(min(complete_wait_s, max(0.0, stop - time.perf_counter())), 2)
        return json.dumps({**figures, "lease_next": True, "wait_s": left}).encode() if left else done

    async def chain(token, job):
        """Complete the job asking for the next, which comes back already running, and so on
        while the coordinator has work for this slot."""
        nonlocal completed
        while job is not None:
            t0 = time.perf_counter()
            status, raw = await http.call("POST", f"/v1/jobs/{job['id']}/complete", token,
                                          done_waiting())
            count("complete", status, t0)
            if status != 200:
                return
            completed += 1
            job = json.loads(raw).get("next") if time.perf_counter() < stop else None

    async def lease_for_a_free_slot(token, free: asyncio.Semaphore) -> dict | None:
        """Take a free slot and lease (started, waiting up to lease_wait_s for a job); without
        a job the slot is free again, after a poll interval when the 204 did not wait."""
        await free.acquire()
        t0 = time.perf_counter()
        wait_s = round(min(lease_wait_s, max(0.0, stop - t0)), 2)  # never past the run
        status, raw = await http.call("POST", "/v1/hosts/lease", token,
                                      json.dumps({"start": True, "wait_s": wait_s}).encode())
        count("lease", status, t0)
        if status == 200:
            return json.loads(raw)
        free.release()
        if not lease_wait_s or time.perf_counter() - t0 < min(1.0, lease_wait_s / 2):
            await asyncio.sleep(poll_s)
        return None

    async def host(token):
        """Like the agent: while a slot is free, lease; a leased job runs as a chain in its
        slot."""
        free = asyncio.Semaphore(JOB_SLOTS)
        running = set()
        while time.perf_counter() < stop:
            job = await lease_for_a_free_slot(token, free)
            if job is None:
                continue
            task = asyncio.create_task(chain(token, job))
            running.add(task)
            task.add_done_callback(lambda t: (running.discard(t), free.release()))
        if running:
            await asyncio.wait(running)

    async def host_reporting_together(token):
        """Like the agent: slots lease as `host` does, but a finished job's report
        goes at once only when no report call of this host is in flight; otherwise it waits
        for that call and goes with the others then, in one POST /v1/jobs/complete with
        lease_next (each next job comes back running, in the slot that reported)."""
        free = asyncio.Semaphore(JOB_SLOTS)
        pending: list[dict] = []
        reporting: asyncio.Task | None = None

        async def report():
            nonlocal completed
            while pending:
                batch = pending[:]
                pending.clear()
                t0 = time.perf_counter()
                body = {"jobs": [{"id": job["id"], **figures} for job in batch],
                        "lease_next": time.perf_counter() < stop}
                status, raw = await http.call("POST", "/v1/jobs/complete", token,
                                              json.dumps(body).encode())
                count("complete", status, t0)
                following = []
                if status == 200:
                    answer = json.loads(raw)
                    completed += sum("error" not in item for item in answer["jobs"])
                    following = answer.get("next") or []
                pending.extend(following)  # their slots stay taken
                for _ in range(len(batch) - len(following)):
                    free.release()

        while time.perf_counter() < stop:
            job = await lease_for_a_free_slot(token, free)
            if job is None:
                continue
            pending.append(job)
            if reporting is None or reporting.done():
                reporting = asyncio.create_task(report())
        if reporting is not None:
            await reporting

    async def keep_alive():
        while time.perf_counter() < stop:
            await asyncio.sleep(10)
            for token in host_tokens:
                await http.call("POST", "/v1/hosts/heartbeat", token, hb)

    await asyncio.gather(*(submitter() for _ in range(submitters)),
                         *((host_reporting_together if complete_batch else host)(t)
                           for t in host_tokens), keep_alive())
    elapsed = time.perf_counter() - began
    from scans.grader.figures import percentile

    calls = sum(sum(by_status.values()) for by_status in statuses.values())
    return {
        "completed_per_s": round(completed / elapsed, 1), "submitted": submitted,
        "completed": completed, "seconds": round(elapsed, 1), "statuses": statuses,
        "http_calls_per_job": round(calls / max(1, completed), 2),
        "latency_ms": {k: {"p50": round(percentile(v, 50), 1), "p99": round(percentile(v, 99), 1)}
                       for k, v in latencies.items()},
    }


def fold_latency(wait_s: float = 10.0) -> dict:
    from django.db.models import F

    from benchmarks.models import Job
    from scans.grader.figures import percentile

    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and Job.dangerously_unscoped.filter(
            status="completed", folded_at__isnull=True).exists():
        time.sleep(0.2)
    lags = [
        (row["folded_at"] - row["completed_at"]).total_seconds() * 1000
        for row in Job.dangerously_unscoped.filter(status="completed", folded_at__isnull=False)
        .annotate(x=F("folded_at")).values("folded_at", "completed_at")
    ]
    unfolded = Job.dangerously_unscoped.filter(status="completed", folded_at__isnull=True).count()
    if not lags:
        return {"unfolded": unfolded}
    return {"folded": len(lags), "unfolded_after_wait": unfolded,
            "p50_ms": round(percentile(lags, 50), 1), "p99_ms": round(percentile(lags, 99), 1),
            "max_ms": round(max(lags), 1),
            "within_5s_share": round(sum(x <= 5000 for x in lags) / len(lags), 4)}


# --- main ------------------------------------------------------------------------------------


def phase_done(name: str, figures: dict) -> None:
    print(f"{name}: {json.dumps(figures)}", file=sys.stderr, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=4, help="gunicorn worker processes")
    parser.add_argument("--threads", type=int, default=1,
                        help="threads per worker (above 1: gthread workers with keep-alive)")
    parser.add_argument("--seconds", type=float, default=20.0, help="length of each measured run")
    parser.add_argument("--hosts", type=int, default=40_000,
                        help="simulated heartbeating hosts (more than 3 x the heartbeats/s measured: "
                             "a host that calls sooner than 3 s after its last is not steady)")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--skip-jobs", action="store_true")
    parser.add_argument("--only-jobs", action="store_true",
                        help="skip the heartbeat phases and pgbench (to compare job runs)")
    parser.add_argument("--waiting-hosts", type=int, default=0,
                        help="also measure heartbeats while this many idle hosts hold waiting "
                             "leases (needs more gthread threads than that)")
    parser.add_argument("--lease-wait-s", type=float, default=25.0,
                        help="how long a simulated host's lease waits for a job (0: poll every "
                             "second after a 204, as before issue 25)")
    parser.add_argument("--pool", type=int, default=0,
                        help="DB_POOL_MAX_SIZE of the web processes (0: no pool, a connection "
                             "per thread)")
    parser.add_argument("--waiting-per-process", type=int, default=None,
                        help="NETWORK_WAITING_LEASES_PER_PROCESS of the web processes")
    parser.add_argument("--submit-batch", type=int, default=1,
                        help="jobs per submission (above 1: POST /v1/jobs/batch)")
    parser.add_argument("--complete-batch", action="store_true",
                        help="hosts report their slots' jobs together (POST /v1/jobs/complete) "
                             "when a report call is already in flight, as the agent does")
    parser.add_argument("--complete-wait-s", type=float, default=0.0,
                        help="a completion with lease_next waits this long for the next job "
                             "(instead of the slot's next lease waiting)")
    parser.add_argument("--celery", choices=["split", "shared"], default="split",
                        help="split: a folds worker and a passes worker, one thread each; "
                             "shared: one worker of two threads serving both queues")
    parser.add_argument("--worker-connections", type=int, default=1000,
                        help="gunicorn's connections per gthread worker, kept-alive ones included "
                             "(its default: 1000)")
    parser.add_argument("--server", choices=["gunicorn", "granian"], default="gunicorn",
                        help="the WSGI server (granian: not a dependency; pip install granian)")
    parser.add_argument("--heartbeat-server", choices=["web", "uvicorn"], default="uvicorn",
                        help="web: heartbeats to the web server (its WSGI fast path); uvicorn: to the "
                             "heartbeat server (tokvera_site.heartbeats_asgi) on --port + 1")
    parser.add_argument("--jobs-runs", type=int, default=2,
                        help="identical jobs runs, each followed by the workers' RSS (memory flat "
                             "from one to the next)")
    parser.add_argument("--heartbeat-connections", choices=["kept", "new"], default="kept",
                        help="kept: heartbeats reuse kept-alive connections (a proxy's pooled "
                             "upstream connections, docs/operations.md); new: a connection per "
                             "heartbeat (hosts straight to the server, 15 s apart)")
    parser.add_argument("--heartbeat-workers", type=int, default=1,
                        help="uvicorn worker processes of the heartbeat server")
    args = parser.parse_args()

    recreate_database()
    seeded = seed(args.hosts)
    heartbeat_port = args.port + 1 if args.heartbeat_server == "uvicorn" else None
    gunicorn, celery, heartbeat_server = start_services(
        args.port, args.workers, args.threads, args.pool, args.waiting_per_process, args.server,
        args.celery, args.worker_connections, heartbeat_port, args.heartbeat_workers)

    def http() -> Http:  # one pool per event loop (each phase runs its own)
        return Http(args.port, keep_alive=args.threads > 1)

    def hb_http() -> Http:  # where hosts send heartbeats
        kept = args.heartbeat_connections == "kept" and (heartbeat_port or args.threads > 1)
        return Http(heartbeat_port or args.port, keep_alive=bool(kept))

    def jobs_run() -> dict:  # one jobs phase, the same each time
        return run(jobs_flow(http(), seeded["buyer_token"], seeded["job_tokens"], args.seconds,
                             lease_wait_s=args.lease_wait_s, submit_batch=args.submit_batch,
                             complete_batch=args.complete_batch,
                             complete_wait_s=args.complete_wait_s))

    def hb_pids() -> list[int]:
        if heartbeat_server is None:
            return children(gunicorn.pid)
        return children(heartbeat_server.pid) if args.heartbeat_workers > 1 else [heartbeat_server.pid]

    result: dict = {"workers": args.workers, "threads": args.threads, "hosts": args.hosts,
                    "worker_connections": args.worker_connections,
                    "pool": args.pool, "waiting_per_process": args.waiting_per_process,
                    "submit_batch": args.submit_batch, "complete_batch": args.complete_batch,
                    "celery": args.celery, "heartbeat_server": args.heartbeat_server,
                    "heartbeat_connections": args.heartbeat_connections,
                    "heartbeat_workers": args.heartbeat_workers, "cpus": os.cpu_count()}
    usage0 = resource.getrusage(resource.RUSAGE_SELF)
    try:
        time.sleep(1)
        result["rss_mb_start"] = worker_rss_mb(gunicorn.pid)
        # warm every worker (imports, connections) and fill the cache's catalog ids
        run(heartbeats_closed(http(), seeded["hb_tokens"][:200], 2, 8))
        if heartbeat_server is not None:
            run(heartbeats_closed(hb_http(), seeded["hb_tokens"][:200], 2, 8))
        result["rss_mb_warm"] = worker_rss_mb(gunicorn.pid)
        if heartbeat_server is not None:
            result["heartbeat_server_rss_mb_warm"] = rss_mb(hb_pids())
        # The ceiling of this stack on this machine: a 401 for a malformed token, no database.
        if not args.only_jobs:  # the heartbeat phases and the yardstick
            floor = run(heartbeats_closed(hb_http(), ["tkh_malformed"], min(args.seconds, 5), 32))
            result["floor_401_per_s"] = round(floor["statuses"].get(401, 0) / floor["seconds"], 1)
            web = hb_pids()
            cpu0 = cpu_seconds(web)
            # Not the warm-up's tokens: those are at their 20-a-minute limit.
            time.sleep(STEADY_GAP_S)
            closed = run(heartbeats_closed(hb_http(), seeded["hb_tokens"][200:], args.seconds, 32))
            closed["web_cpu_ms_per_request"] = round(
                (cpu_seconds(web) - cpu0) * 1000 / max(1, sum(closed["statuses"].values())), 2)
            result["heartbeats_max"] = closed
            phase_done("heartbeats, most per second", closed)
            result["rss_mb_after_heartbeats_max"] = worker_rss_mb(gunicorn.pid)
            if args.waiting_hosts:
                result["database_connections_before_waiting"] = database_connections()
                result["heartbeats_while_hosts_wait"] = run(heartbeats_while_hosts_wait(
                    args.port, heartbeat_port or args.port, seeded["hb_tokens"][: -args.waiting_hosts],
                    seeded["hb_tokens"][-args.waiting_hosts:], args.seconds, 32))
                result["rss_mb_while_hosts_waited"] = worker_rss_mb(gunicorn.pid)
            # Far above capacity the queue only grows, and its p99 says how long the run was (and
            # a 1,000/s run at 150/s served takes minutes): then only the 80 % run below.
            if closed["per_s"] * 1.25 >= 1000:
                time.sleep(STEADY_GAP_S)
                result["heartbeats_at_1000_per_s"] = run(
                    heartbeats_open(hb_http(), seeded["hb_tokens"], args.seconds, 1000.0))
                phase_done("heartbeats at 1,000/s", result["heartbeats_at_1000_per_s"])
            if closed["per_s"] > 0:  # the goal's rate: below capacity, to tell queueing from cost
                time.sleep(STEADY_GAP_S)
                result["heartbeats_at_80pct_of_max"] = run(
                    heartbeats_open(hb_http(), seeded["hb_tokens"], args.seconds, 0.8 * closed["per_s"]))
                phase_done("heartbeats at 80 % of the most", result["heartbeats_at_80pct_of_max"])
            # The yardstick, right after the heartbeats, on the same server (the site is idle now).
            result["pgbench_single_row_update"] = pgbench_single_row_update(args.seconds)
            result["heartbeats_to_pgbench_ratio"] = round(
                closed["per_s"] / result["pgbench_single_row_update"]["updates_per_s"], 3)
            result["rss_mb_after_heartbeats"] = worker_rss_mb(gunicorn.pid)
            if heartbeat_server is not None:
                result["heartbeat_server_rss_mb_after_heartbeats"] = rss_mb(hb_pids())
        web = children(gunicorn.pid)
        if not args.skip_jobs:
            result["celery_rss_mb_before_jobs"] = rss_mb(celery_pids(celery))
            cpu0, fold_cpu0 = cpu_seconds(web), cpu_seconds(celery_pids(celery))
            jobs = jobs_run()
            jobs["web_cpu_ms_per_job"] = round(
                (cpu_seconds(web) - cpu0) * 1000 / max(1, jobs["completed"]), 2)
            jobs["celery_cpu_ms_per_job"] = round(
                (cpu_seconds(celery_pids(celery)) - fold_cpu0) * 1000
                / max(1, jobs["completed"]), 2)
            result["jobs"] = jobs
            result["fold_latency"] = fold_latency()
            result["rss_mb_after_jobs"] = worker_rss_mb(gunicorn.pid)
            result["celery_rss_mb_after_jobs"] = rss_mb(celery_pids(celery))
            # more identical jobs runs: flat memory means no growth from one to the next
            for n in range(2, args.jobs_runs + 1):
                jobs_run()
                after = "second_jobs_run" if n == 2 else f"jobs_run_{n}"
                result[f"rss_mb_after_{after}"] = worker_rss_mb(gunicorn.pid)
                result[f"celery_rss_mb_after_{after}"] = rss_mb(celery_pids(celery))
    finally:
        usage1 = resource.getrusage(resource.RUSAGE_SELF)
        result["load_generator_cpu_s"] = round(
            (usage1.ru_utime - usage0.ru_utime) + (usage1.ru_stime - usage0.ru_stime), 1)
        servers = [gunicorn, *celery, *([heartbeat_server] if heartbeat_server else [])]
        for proc in servers:
            proc.terminate()
        for proc in servers:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
    result["load_average_1_5_15"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(result, indent=2))
    lines = []
    if "heartbeats_to_pgbench_ratio" in result:
        at_1000 = result.get("heartbeats_at_1000_per_s")
        at_80 = result.get("heartbeats_at_80pct_of_max")
        lines += [
            f"heartbeats: {result['heartbeats_max']['per_s']}/s max, pgbench single-row UPDATE "
            f"{result['pgbench_single_row_update']['updates_per_s']}/s, ratio "
            f"{result['heartbeats_to_pgbench_ratio']} (goal >= 0.25); a 401 without the database "
            f"{result['floor_401_per_s']}/s",
            (f"at 1,000/s open loop: {at_1000['per_s']}/s served, p50 {at_1000['p50_ms']} ms, "
             f"p99 {at_1000['p99_ms']} ms" if at_1000 else
             "at 1,000/s open loop: not run (far above the maximum)"),
            (f"at 80 % of the maximum ({at_80['target_rate']:.0f}/s) open loop: {at_80['per_s']}/s "
             f"served, p50 {at_80['p50_ms']} ms, p99 {at_80['p99_ms']} ms (goal < 50 ms)"
             if at_80 else "at 80 % of the maximum: not run (no heartbeat answered)"),
            f"web CPU per heartbeat {result['heartbeats_max']['web_cpu_ms_per_request']} ms",
        ]
        if "heartbeats_while_hosts_wait" in result:
            held = result["heartbeats_while_hosts_wait"]
            lines.append(f"while {held['waiting_hosts']} hosts wait: heartbeats {held['per_s']}/s, "
                         f"p99 {held['p99_ms']} ms; PostgreSQL connections "
                         f"{result['database_connections_before_waiting']} before, "
                         f"{held['database_connections_while_waiting']} while they wait; RSS "
                         f"{result['rss_mb_while_hosts_waited']} MB")
    if "jobs" in result:
        fold = result["fold_latency"]
        lines.append(f"jobs: {result['jobs']['completed_per_s']}/s submit -> complete "
                     f"({result['jobs']['http_calls_per_job']} calls, "
                     f"{result['jobs']['web_cpu_ms_per_job']} ms web CPU per job; goal >= 200/s); "
                     f"fold p99 {fold.get('p99_ms')} ms, {fold.get('within_5s_share')} within 5 s; "
                     f"{result['jobs']['celery_cpu_ms_per_job']} ms Celery CPU per job "
                     f"({args.celery}), Celery RSS {result.get('celery_rss_mb_before_jobs')} -> "
                     f"{result.get('celery_rss_mb_after_second_jobs_run')} MB")
    end = (result.get("rss_mb_after_second_jobs_run") or result.get("rss_mb_after_jobs")
           or result.get("rss_mb_after_heartbeats"))
    if end and result.get("rss_mb_warm"):
        lines.append(f"median worker RSS: warm {statistics.median(result['rss_mb_warm'])} MB, "
                     f"end {statistics.median(end)} MB")
    lines.append(f"load average {result['load_average_1_5_15']} on {os.cpu_count()} CPUs")
    print("\n".join(lines), file=sys.stderr)

if __name__ == "__main__":
    main()
