"""Network coordinator benchmark. Not a test: run it by hand.

    .venv/bin/python tests/perf/bench_network.py [--seconds 20]

With no option it runs the production shape of docs/operations.md ("Production"): gunicorn
gthread, 2 workers x 128 threads, keep-alive 30 s, DB_POOL_MAX_SIZE=16 and
NETWORK_WAITING_LEASES_PER_PROCESS=96; the host-call server (uvicorn
tokvera_site.host_calls_asgi, one process, NETWORK_WAITING_LEASES_PER_PROCESS=10000) on
--port + 1, reached over kept-alive connections as the documented nginx upstream keeps them,
answering every host's calls (heartbeats, leases, completions) while the buyer's submissions
go to gunicorn; Celery as production splits it (a folds worker and a `passes` worker, one
thread each). Its clients: 40,000 heartbeating hosts, and 100 job
hosts of 2 slots that behave as benchmarks/agent does (one lease per host waiting up to 25 s,
completions asking for the next job without waiting for it, a host's reports sent together
while one is in flight), fed by a buyer that submits batches of 50. Each option changes one
setting; the output names every setting and those that differ from the production shape.

Needs PostgreSQL at $BENCH_PG (postgres://postgres@127.0.0.1:5432, trust auth), its `pgbench`,
and Redis ($BENCH_BROKER_URL, $BENCH_CACHE_URL: databases 12 and 13 of 127.0.0.1:6379 unless
set). It (re)creates the database $BENCH_DB (`tokvera_bench`) and migrates it (--migrated: use
it as it is, migrated and empty), makes `<$BENCH_DB>_pgbench` for pgbench and drops it after,
seeds hosts and a buyer, starts the stack and measures, with a raw asyncio HTTP client on
uvloop, on 127.0.0.1:

0. pgbench's single-row UPDATE (`UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE
   aid = :aid`, 32 clients) on the same PostgreSQL, in the same run: the yardstick.
1. Heartbeats from `--hosts` simulated hosts (steady state: each host already advertised its
   models once), sent to the host-call server (`--heartbeat-server uvicorn`) or to the web
   (`web`: gunicorn's fast path): the most heartbeats/s it sustains with 32 callers, then a
   fixed-rate (open-loop) run at 1,000/s for latency p50/p99, measured from each request's
   scheduled time, so a backed-up server is counted, not hidden (each call starts when it is
   due, on a connection of its own when none is idle; not run when 1,000/s is more than
   1.25 x the maximum), and at 80 % of the maximum (the goal's rate). Phases start 3 s apart
   and each host calls at most once in 3 s (STEADY_GAP_S): a run at R/s needs more than 3 x R
   hosts, hence the default of 40,000. Goal: at least 0.25 x pgbench's rate, p99 <
   50 ms at 80 % of the maximum.
2. Jobs through submit -> complete: the buyer submits (at most 400 unsettled at a time) while
   the job hosts lease with {"start": true, "wait_s": --lease-wait-s} (held by the coordinator
   until a pass assigns the host a job) and complete with {"lease_next": true} (the next job,
   when one is already assigned, comes back running). The job hosts' calls go to the
   host-call server (`--job-calls uvicorn`) or to gunicorn (`web`), the buyer's to gunicorn.
   Reports completed jobs/s, the web's CPU per job (the CPU of gunicorn's workers and of the
   host-call server over the phase / jobs completed, and each apart) and, from the database,
   the EWMA fold latency (folded_at - completed_at). Goal: >= 200 jobs/s at <= 5 ms of web
   CPU per job, folds within 5 s. Other shapes: --complete-wait-s (a completion waits for the
   slot's next job), --no-complete-batch (each report alone), --submit-batch 1, --server
   granian (its HTTP in Rust; not a dependency: pip install granian).
3. Memory of each gunicorn worker (RSS) before, between and after the phases. Goal: flat.

What limits each figure: every phase reports the CPU seconds, and the share of the box's CPUs,
of each component (the load generator: this process and pgbench; the host-call server;
gunicorn's workers; Celery; every `postgres` process; Redis; the rest of the box) and the
box's idle share. A phase whose load generator used at least 90 % of each of its threads'
cores could not have sent more: it is marked "limited_by": "client" and its figure is a lower
bound of the server's, not the server's figure; otherwise "limited_by": "server", naming the
busiest component. Every phase has a deadline (its length plus PHASE_GRACE_S): calls still
unanswered then are given up and the phase is reported as stalled, so a run always ends.

Percentiles are the project's nearest-rank `scans.grader.figures.percentile`. Prints one JSON
summary, then the configuration, the headline figures with what limited each, and the
machine's load average on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import resource
import signal
import statistics
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

ROOT = Path(__file__).resolve().parents[2]
# The PostgreSQL server (BENCH_PG) and a database name of its own (BENCH_DB) where several
# people share one server.
PG = os.environ.get("BENCH_PG", "postgres://postgres@127.0.0.1:5432")
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
# How long past its planned length a phase's calls may still be answered: waiting calls never
# ask to wait past the phase's end, so only a server that fell behind needs it.
PHASE_GRACE_S = 10.0
PGBENCH_CLIENTS, PGBENCH_THREADS = 32, 2
# gunicorn's keep-alive of docs/operations.md's command.
KEEP_ALIVE_S = 30
# NETWORK_WAITING_LEASES_PER_PROCESS of the host-call server (docs/operations.md): a call
# waiting on its event loop holds no thread, so it may hold every host's.
HOST_CALL_WAITING = 10_000

T = TypeVar("T")


def run(coroutine):
    """A phase on a fresh event loop: uvloop's, so the load generator costs the box less."""
    import uvloop

    return uvloop.run(coroutine)


# --- a minimal HTTP/1.1 client ---------------------------------------------------------------


class CutOff(Exception):
    """A call still unanswered at its phase's deadline."""


class Deadline:
    """When a phase gives up the calls still in flight (its length plus PHASE_GRACE_S), and
    how many it gave up: a phase that gave any up stalled."""

    def __init__(self, seconds: float, grace_s: float = PHASE_GRACE_S):
        self.at = time.perf_counter() + seconds + grace_s
        self.cut_off = 0

    async def bound(self, awaitable: Awaitable[T]) -> T:
        left = self.at - time.perf_counter()
        if left <= 0:
            if asyncio.iscoroutine(awaitable):
                awaitable.close()
            raise CutOff
        scope = asyncio.timeout(left)
        try:
            async with scope:
                return await awaitable
        except TimeoutError:
            if scope.expired():
                raise CutOff from None
            raise


class Http:
    """A pool of HTTP/1.1 connections: kept alive when the server allows it (gthread workers),
    reopened when the server closes them (sync workers close after every response). Every call
    ends by the phase's deadline."""

    def __init__(self, port: int, deadline: Deadline, keep_alive: bool = True):
        self.port = port
        self.deadline = deadline
        self.keep_alive = keep_alive
        self._idle: list[tuple] = []

    async def call(self, method: str, path: str, token: str, body: bytes = b"") -> tuple[int, bytes]:
        """(status, body); status 0 when the connection failed or the deadline passed (counted,
        not raised)."""
        for attempt in (1, 2):
            conn = self._idle.pop() if self._idle and attempt == 1 else None
            fresh = conn is None
            try:
                if conn is None:
                    conn = await self.deadline.bound(asyncio.open_connection("127.0.0.1", self.port))
                status, data, reusable = await self.deadline.bound(
                    self._exchange(conn, method, path, token, body))
            except CutOff:
                if conn is not None:
                    conn[1].close()
                self.deadline.cut_off += 1
                return 0, b""
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
                   env=ENV, check=True, timeout=600)


def prepare_pgbench(scale: int) -> None:
    """pgbench's own database, `pgbench -i` at this scale (100,000 accounts a unit)."""
    import psycopg

    with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {PGBENCH_DB} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {PGBENCH_DB}")
    subprocess.run(["pgbench", "-i", "-q", "-s", str(scale), f"{PG}/{PGBENCH_DB}"], check=True,
                   capture_output=True, timeout=600)


def drop_pgbench() -> None:
    import psycopg

    with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {PGBENCH_DB} WITH (FORCE)")


def pgbench_single_row_update(seconds: float, scale: int) -> dict:
    """pgbench's rate of single-row UPDATEs on the same server (its own database)."""
    import re
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".sql") as script:
        script.write(f"\\set aid random(1, {100_000 * scale})\n"
                     "UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid = :aid;\n")
        script.flush()
        try:
            out = subprocess.run(
                ["pgbench", "-n", "-c", str(PGBENCH_CLIENTS), "-j", str(PGBENCH_THREADS),
                 "-T", str(max(1, round(seconds))), "-f", script.name, f"{PG}/{PGBENCH_DB}"],
                check=True, capture_output=True, text=True, timeout=seconds + PHASE_GRACE_S)
        except subprocess.TimeoutExpired:
            return {"updates_per_s": None, "stalled": True}
    tps = float(re.search(r"tps = ([0-9.]+)", out.stdout).group(1))
    latency = re.search(r"latency average = ([0-9.]+) ms", out.stdout)
    return {"updates_per_s": round(tps, 1), "clients": PGBENCH_CLIENTS, "scale": scale,
            "seconds": max(1, round(seconds)),
            "latency_avg_ms": float(latency.group(1)) if latency else None, "stalled": False}


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


@dataclass
class Stack:
    """The processes under test, each the leader of a process group of its own."""

    gunicorn: subprocess.Popen
    celery: list[subprocess.Popen]
    host_call_server: subprocess.Popen | None
    host_call_workers: int = 1

    def roots(self) -> dict[int, str]:
        """The component each process tree counts towards, by its root's pid."""
        roots = {self.gunicorn.pid: "gunicorn_workers"}
        roots.update({worker.pid: "celery" for worker in self.celery})
        if self.host_call_server is not None:
            roots[self.host_call_server.pid] = "host_call_server"
        return roots

    def host_call_pids(self) -> list[int]:
        if self.host_call_server is None:
            return children(self.gunicorn.pid)
        if self.host_call_workers > 1:
            return children(self.host_call_server.pid)
        return [self.host_call_server.pid]

    def stop(self) -> None:
        processes = [self.gunicorn, *self.celery,
                     *([self.host_call_server] if self.host_call_server else [])]
        for proc in processes:
            proc.terminate()
        for proc in processes:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)  # its workers too
                proc.wait()


def start_services(args: argparse.Namespace, host_call_port: int | None) -> Stack:
    worker_class = (["--worker-class", "gthread", "--threads", str(args.threads),
                     "--worker-connections", str(args.worker_connections)]
                    if args.threads > 1 else [])
    web_env = {**ENV, "DB_POOL_MAX_SIZE": str(args.pool),
               "NETWORK_WAITING_LEASES_PER_PROCESS": str(args.waiting_per_process)}
    command = [sys.executable, "-m", "gunicorn", "tokvera_site.wsgi", "--bind",
               f"127.0.0.1:{args.port}", "--workers", str(args.workers), *worker_class,
               "--backlog", "4096", "--keep-alive", str(KEEP_ALIVE_S), "--log-level", "warning"]
    if args.server == "granian":  # HTTP in Rust, the WSGI app on `threads` blocking threads
        command = [str(Path(sys.executable).parent / "granian"), "--interface", "wsgi",
                   "tokvera_site.wsgi:application", "--host", "127.0.0.1", "--port", str(args.port),
                   "--workers", str(args.workers), "--blocking-threads", str(args.threads),
                   "--backlog", "4096", "--log-level", "warning"]
    # Each in a process group of its own, so that stopping one stops its workers too.
    gunicorn = subprocess.Popen(command, cwd=ROOT, env=web_env, start_new_session=True)
    host_calls = None
    if host_call_port is not None:  # the host-call server (docs/operations.md), a port of its own
        host_calls = subprocess.Popen(
            [str(Path(sys.executable).parent / "uvicorn"),
             "tokvera_site.host_calls_asgi:application",
             "--host", "127.0.0.1", "--port", str(host_call_port), "--loop", "uvloop",
             "--http", "httptools", "--no-access-log", "--no-proxy-headers",
             "--log-level", "warning", "--backlog", "4096",
             *(["--workers", str(args.host_call_workers)] if args.host_call_workers > 1 else [])],
            cwd=ROOT, env={**ENV, "NETWORK_WAITING_LEASES_PER_PROCESS": str(HOST_CALL_WAITING)},
            start_new_session=True)
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
            cwd=ROOT, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True)
        for n, (queue, concurrency) in enumerate(queues[args.celery])
    ]
    stack = Stack(gunicorn, celery_workers, host_calls, args.host_call_workers)
    import httpx

    deadline = time.monotonic() + 60
    for url in [f"http://127.0.0.1:{args.port}/healthz",
                *([f"http://127.0.0.1:{host_call_port}/v1/hosts/heartbeat"] if host_calls else [])]:
        while time.monotonic() < deadline:
            try:
                httpx.get(url, timeout=2, trust_env=False).raise_for_status()
                break
            except httpx.HTTPStatusError:
                break  # answering (the host-call server answers a GET 405)
            except httpx.HTTPError:
                time.sleep(0.3)
        else:
            stack.stop()
            raise SystemExit(f"{url} did not answer")
    return stack


def children(master: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(master)], capture_output=True, text=True)
    return [int(x) for x in out.stdout.split()]


def rss_mb(pids: list[int]) -> list[float]:
    out = subprocess.run(["ps", "-o", "rss=", "-p", ",".join(map(str, pids))],
                         capture_output=True, text=True)
    return sorted(round(int(x) / 1024, 1) for x in out.stdout.split())


def worker_rss_mb(master: int) -> list[float]:
    out = subprocess.run(["ps", "-o", "rss=", "--ppid", str(master)], capture_output=True, text=True)
    return sorted(round(int(x) / 1024, 1) for x in out.stdout.split())


def celery_pids(workers: list[subprocess.Popen]) -> list[int]:
    return [pid for worker in workers for pid in (worker.pid, *children(worker.pid))]


# --- CPU per component -----------------------------------------------------------------------

COMPONENTS = ("load_generator", "host_call_server", "gunicorn_workers", "celery", "postgresql",
              "redis", "other")
SERVER_COMPONENTS = COMPONENTS[1:-1]
# A phase's processes are read this often, so one that ends within the phase (pgbench's
# backends) is counted up to its last reading.
SAMPLE_S = 0.5
# A load generator this busy (a share of one core per thread it runs) could not have sent
# more: the phase's figure is then a lower bound of the server's.
CLIENT_BOUND_SHARE = 0.9
BY_NAME = {"postgres": "postgresql", "redis-server": "redis"}


def process_table() -> dict[int, tuple[int, str, int]]:
    """Every process of the box: pid -> (parent pid, name, user + system CPU in clock ticks)."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue  # ended meanwhile
        head, tail = stat.rsplit(")", 1)
        fields = tail.split()
        table[int(entry)] = (int(fields[1]), head.split("(", 1)[1], int(fields[11]) + int(fields[12]))
    return table


def box_ticks() -> tuple[int, int, int]:
    """The box's CPU time so far, in clock ticks: (all, idle or waiting on I/O, stolen by the
    hypervisor)."""
    values = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    return sum(values), values[3] + values[4], values[7]


def own_cpu_s() -> float:
    """This process's CPU and its finished children's (pgbench) so far."""
    mine = resource.getrusage(resource.RUSAGE_SELF)
    waited = resource.getrusage(resource.RUSAGE_CHILDREN)
    return mine.ru_utime + mine.ru_stime + waited.ru_utime + waited.ru_stime


@dataclass
class CpuMeter:
    """The CPU seconds of each component over one phase, read from /proc: the stack's processes
    by the tree they belong to (gunicorn's master not counted: only its workers), PostgreSQL
    and Redis by name, the load generator from this process's own usage (less the thread that
    reads /proc), and the box's idle share from /proc/stat."""

    roots: dict[int, str]
    started: float = 0.0
    _first: dict[int, int] = field(default_factory=dict)
    _last: dict[int, tuple[str, int]] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _sampler_cpu_s: float = 0.0

    def __enter__(self) -> CpuMeter:
        self._box0, self._own0 = box_ticks(), own_cpu_s()
        self.started = time.perf_counter()
        self._first = {pid: ticks for pid, (_, _, ticks) in self._read().items()}
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._read()
        self.seconds = time.perf_counter() - self.started
        self._box1, self._own1 = box_ticks(), own_cpu_s()

    def _sample(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            self._read()
        self._sampler_cpu_s = time.thread_time()

    def _read(self) -> dict[int, tuple[int, str, int]]:
        table = process_table()
        for pid, (_, name, ticks) in table.items():
            component = BY_NAME.get(name) or self._tree_of(pid, table)
            if component is not None:
                self._last[pid] = (component, ticks)
        return table

    def _tree_of(self, pid: int, table: dict[int, tuple[int, str, int]]) -> str | None:
        if pid in self.roots:
            return None if self.roots[pid] == "gunicorn_workers" else self.roots[pid]
        seen = 0
        while pid in table and seen < 64:  # up to a root, or to a process not of the stack
            pid, seen = table[pid][0], seen + 1
            if pid in self.roots:
                return self.roots[pid]
        return None

    def figures(self) -> dict:
        tick = os.sysconf("SC_CLK_TCK")
        cpu_s = dict.fromkeys(COMPONENTS, 0.0)
        for pid, (component, ticks) in self._last.items():
            cpu_s[component] += (ticks - self._first.get(pid, 0)) / tick
        cpu_s["load_generator"] = max(0.0, self._own1 - self._own0 - self._sampler_cpu_s)
        total, idle, steal = (b - a for a, b in zip(self._box0, self._box1, strict=True))
        busy_s = (total - idle - steal) / tick
        cpu_s["other"] = max(0.0, busy_s - sum(cpu_s.values()))
        cpus = os.cpu_count() or 1
        return {
            "seconds": round(self.seconds, 2),
            "cpu_s": {name: round(value, 2) for name, value in cpu_s.items()},
            "share_of_cpus": {name: round(value / (self.seconds * cpus), 3)
                              for name, value in cpu_s.items()},
            "idle_share": round(idle / max(1, total), 3),
            "steal_share": round(steal / max(1, total), 3),
        }


def what_limited(cpu: dict, generator_threads: int) -> dict:
    """limited_by "client" when the load generator was as busy as its threads can be (the
    figure is a lower bound of the server's), else "server"; busiest: the server component
    with the most CPU."""
    server = {name: cpu["cpu_s"][name] for name in SERVER_COMPONENTS}
    cores = cpu["cpu_s"]["load_generator"] / max(cpu["seconds"], 1e-9)
    client_bound = cores >= CLIENT_BOUND_SHARE * generator_threads
    return {"limited_by": "client" if client_bound else "server",
            "load_generator_cores": round(cores, 2), "busiest": max(server, key=server.__getitem__)}


def measured(name: str, work: Callable[[], dict], stack: Stack, generator_threads: int = 1,
             deadline: Deadline | None = None) -> dict:
    """A phase's figures with its CPU per component, what limited it and whether it stalled
    (calls given up at its deadline)."""
    with CpuMeter(stack.roots()) as meter:
        figures = work()
    figures["cpu"] = meter.figures()
    figures.update(what_limited(figures["cpu"], generator_threads))
    if deadline is not None:
        figures["cut_off_at_deadline"] = deadline.cut_off
        figures["stalled"] = deadline.cut_off > 0
    for line in phase_lines(name, figures):
        print(line, file=sys.stderr, flush=True)
    return figures

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
                                      waiting: list[str], seconds: float, callers: int,
                                      deadline: Deadline) -> dict:
    """Closed-loop heartbeats while `waiting` idle hosts each hold a waiting lease on `port`
    (renewed when it ends): what serving waiting hosts costs the busiest call."""
    stop = time.perf_counter() + seconds
    leases: dict[int, int] = {}

    async def wait_for_work(token):
        http = Http(port, deadline)  # a connection of its own, as each agent has
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
    result = await heartbeats_closed(Http(heartbeat_port, deadline), tokens,
                                     max(1.0, stop - time.perf_counter()), callers)
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


async def jobs_flow(http: Http, hosts_http: Http, buyer: str, host_tokens: list[str],
                    seconds: float, submitters: int = 8, max_unsettled: int = 400,
                    poll_s: float = 1.0,
                    lease_wait_s: float = 0.0, submit_batch: int = 1,
                    complete_batch: bool = False, complete_wait_s: float = 0.0) -> dict:
    """The buyer's calls on `http`, the job hosts' on `hosts_http`."""
    hb = json.dumps({"models": [JOB_MODEL], "slots": JOB_SLOTS}).encode()
    for token in host_tokens:
        await hosts_http.call("POST", "/v1/hosts/heartbeat", token, hb)
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
            status, raw = await hosts_http.call("POST", f"/v1/jobs/{job['id']}/complete", token,
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
        status, raw = await hosts_http.call("POST", "/v1/hosts/lease", token,
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
                status, raw = await hosts_http.call("POST", "/v1/jobs/complete", token,
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
        while stop - time.perf_counter() > 10:  # never sleeping past the end
            await asyncio.sleep(10)
            for token in host_tokens:
                await hosts_http.call("POST", "/v1/hosts/heartbeat", token, hb)

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


# --- the run ---------------------------------------------------------------------------------

# The options that make the configuration (the others say how long and where it runs); their
# defaults are the production shape of docs/operations.md.
SHAPE = ("server", "workers", "threads", "worker_connections", "pool", "waiting_per_process",
         "heartbeat_server", "job_calls", "host_call_workers", "heartbeat_connections", "celery",
         "lease_wait_s", "complete_batch", "complete_wait_s", "submit_batch")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0] + " Its defaults are the production shape of "
        "docs/operations.md.",
        formatter_class=lambda prog: argparse.HelpFormatter(prog, width=WIDTH))  # any terminal
    add = parser.add_argument
    add("--seconds", type=float, metavar="S", default=20.0, help="length of each measured phase")
    add("--hosts", type=int, metavar="N", default=40_000,
        help="simulated heartbeating hosts (more than 3 x the heartbeats/s measured: a host "
             "that calls sooner than 3 s after its last is not steady)")
    add("--server", choices=["gunicorn", "granian"], default="gunicorn",
        help="the WSGI server (granian: not a dependency; pip install granian)")
    add("--workers", type=int, metavar="N", default=2, help="web worker processes")
    add("--threads", type=int, metavar="N", default=128,
        help="threads per web worker (1: gunicorn's sync workers, no keep-alive)")
    add("--worker-connections", type=int, metavar="N", default=1000,
        help="gunicorn's connections per gthread worker, kept-alive ones included")
    add("--pool", type=int, metavar="N", default=16,
        help="DB_POOL_MAX_SIZE of the web processes (0: no pool, a connection per thread)")
    add("--waiting-per-process", type=int, metavar="N", default=96,
        help="NETWORK_WAITING_LEASES_PER_PROCESS of the web processes")
    add("--heartbeat-server", choices=["web", "uvicorn"], default="uvicorn",
        help="uvicorn: heartbeats to the host-call server (tokvera_site.host_calls_asgi); "
             "web: to the web server (its WSGI fast path)")
    add("--job-calls", choices=["web", "uvicorn"], default="uvicorn",
        help="uvicorn: the job hosts' calls (heartbeats, leases, completions) to the host-call "
             "server; web: to the web server, as before it served them (the buyer's "
             "submissions go to the web server either way)")
    add("--host-call-workers", type=int, metavar="N", default=1,
        help="processes of the host-call server (uvicorn --workers, one port)")
    add("--heartbeat-connections", choices=["kept", "new"], default="kept",
        help="kept: heartbeats reuse kept-alive connections (a proxy's pooled upstream "
             "connections, docs/operations.md); new: a connection per heartbeat")
    add("--celery", choices=["split", "shared"], default="split",
        help="split: a folds worker and a passes worker, one thread each; shared: one worker "
             "of two threads serving both queues")
    add("--lease-wait-s", type=float, metavar="S", default=25.0,
        help="how long a job host's lease waits for a job (0: poll every second)")
    add("--complete-batch", action=argparse.BooleanOptionalAction, default=True,
        help="a host's reports go together (POST /v1/jobs/complete) while one is in flight, "
             "as the agent sends them")
    add("--complete-wait-s", type=float, metavar="S", default=0.0,
        help="a completion with lease_next waits this long for the slot's next job (the "
             "agent does not)")
    add("--submit-batch", type=int, metavar="N", default=50,
        help="jobs per submission (1: POST /v1/jobs; more: POST /v1/jobs/batch)")
    add("--jobs-runs", type=int, metavar="N", default=2,
        help="identical jobs runs, each followed by the workers' RSS (memory flat from one "
             "to the next)")
    add("--waiting-hosts", type=int, metavar="N", default=0,
        help="also measure heartbeats while this many idle hosts hold waiting leases")
    add("--skip-jobs", action="store_true", help="no jobs phase")
    add("--only-jobs", action="store_true", help="no heartbeat phases and no pgbench")
    add("--pgbench-scale", type=int, metavar="N", default=10,
        help="pgbench's scale (100,000 accounts a unit)")
    add("--port", type=int, metavar="N", default=8765, help="the web server's port")
    add("--host-call-port", type=int, metavar="N", default=None,
        help="the host-call server's port (default: --port + 1)")
    add("--migrated", action="store_true",
        help="use $BENCH_DB as it is, migrated and empty, instead of recreating it")
    add("--json-out", type=Path, metavar="PATH", default=None,
        help="also write the JSON summary to this file")
    return parser


def describe(args: argparse.Namespace, parser: argparse.ArgumentParser) -> dict:
    """Every setting of this run, and which differ from the production shape."""
    settings = {name: str(value) if isinstance(value, Path) else value
                for name, value in vars(args).items()}
    differs = [name for name in SHAPE if settings[name] != parser.get_default(name)]
    return {"production_shape": not differs, "differs_from_production": differs,
            "settings": settings, "keep_alive_s": KEEP_ALIVE_S, "job_hosts": JOB_HOSTS,
            "slots_per_job_host": JOB_SLOTS, "pgbench_clients": PGBENCH_CLIENTS,
            "cpus": os.cpu_count()}


def heartbeat_phases(args: argparse.Namespace, stack: Stack, seeded: dict,
                     heartbeat_port: int | None, lease_port: int, result: dict) -> None:
    """The 401 floor, the most heartbeats/s, open-loop runs at 1,000/s and at 80 % of that
    most, and pgbench beside them."""
    hb_tokens = seeded["hb_tokens"]

    def hb_http(deadline: Deadline) -> Http:  # where hosts send heartbeats
        kept = args.heartbeat_connections == "kept" and (heartbeat_port or args.threads > 1)
        return Http(heartbeat_port or args.port, deadline, keep_alive=bool(kept))

    def phase(name: str, seconds: float, work: Callable[[Http], Awaitable[dict]]) -> dict:
        deadline = Deadline(seconds)
        return measured(name, lambda: run(work(hb_http(deadline))), stack, deadline=deadline)

    # The ceiling of this stack on this machine: a 401 for a malformed token, no database.
    floor_s = min(args.seconds, 5)
    floor = phase("a 401 without the database", floor_s,
                  lambda http: answered_401(http, floor_s))
    result["floor_401"] = floor
    # Not the warm-up's tokens: those are at their 20-a-minute limit.
    time.sleep(STEADY_GAP_S)
    closed = phase("heartbeats, most per second", args.seconds,
                   lambda http: heartbeats_closed(http, hb_tokens[200:], args.seconds, 32))
    server = "host_call_server" if heartbeat_port else "gunicorn_workers"
    closed["server_cpu_ms_per_heartbeat"] = round(
        closed["cpu"]["cpu_s"][server] * 1000
        / max(1, sum(n for status, n in closed["statuses"].items() if status)), 3)
    result["heartbeats_max"] = closed
    result["rss_mb_after_heartbeats_max"] = worker_rss_mb(stack.gunicorn.pid)
    if args.waiting_hosts:
        result["database_connections_before_waiting"] = database_connections()
        deadline = Deadline(args.seconds)
        result["heartbeats_while_hosts_wait"] = measured(
            "heartbeats while hosts wait", lambda: run(heartbeats_while_hosts_wait(
                lease_port, heartbeat_port or args.port, hb_tokens[: -args.waiting_hosts],
                hb_tokens[-args.waiting_hosts:], args.seconds, 32, deadline)),
            stack, deadline=deadline)
        result["rss_mb_while_hosts_waited"] = worker_rss_mb(stack.gunicorn.pid)
    # Far above capacity the queue only grows, and its p99 says how long the run was (and
    # a 1,000/s run at 150/s served takes minutes): then only the 80 % run below.
    if closed["per_s"] * 1.25 >= 1000:
        time.sleep(STEADY_GAP_S)
        result["heartbeats_at_1000_per_s"] = phase(
            "heartbeats at 1,000/s", args.seconds,
            lambda http: heartbeats_open(http, hb_tokens, args.seconds, 1000.0))
    if closed["per_s"] > 0:  # the goal's rate: below capacity, to tell queueing from cost
        time.sleep(STEADY_GAP_S)
        result["heartbeats_at_80pct_of_max"] = phase(
            "heartbeats at 80 % of the most", args.seconds,
            lambda http: heartbeats_open(http, hb_tokens, args.seconds, 0.8 * closed["per_s"]))
    # The yardstick, right after the heartbeats, on the same server (the site is idle now).
    prepare_pgbench(args.pgbench_scale)
    pgbench = measured("pgbench, single-row UPDATEs",
                       lambda: pgbench_single_row_update(args.seconds, args.pgbench_scale),
                       stack, generator_threads=PGBENCH_THREADS)
    result["pgbench_single_row_update"] = pgbench
    if pgbench["updates_per_s"]:
        result["heartbeats_to_pgbench_ratio"] = round(closed["per_s"] / pgbench["updates_per_s"], 3)
    result["rss_mb_after_heartbeats"] = worker_rss_mb(stack.gunicorn.pid)
    if stack.host_call_server is not None:
        result["host_call_server_rss_mb_after_heartbeats"] = rss_mb(stack.host_call_pids())


async def answered_401(http: Http, seconds: float) -> dict:
    """Heartbeats with a malformed token for `seconds`: per_s counts the 401s."""
    figures = await heartbeats_closed(http, ["tkh_malformed"], seconds, 32)
    figures["per_s"] = round(figures["statuses"].get(401, 0) / figures["seconds"], 1)
    return figures


def jobs_phases(args: argparse.Namespace, stack: Stack, seeded: dict, host_call_port: int | None,
                result: dict) -> None:
    """--jobs-runs identical jobs runs, the fold latency of the first, memory after each. The
    job hosts call the host-call server at `host_call_port` (None: gunicorn)."""
    celery = celery_pids(stack.celery)
    result["celery_rss_mb_before_jobs"] = rss_mb(celery)
    for n in range(1, args.jobs_runs + 1):
        deadline = Deadline(args.seconds)

        def one_run(deadline: Deadline = deadline) -> dict:
            web = Http(args.port, deadline, keep_alive=args.threads > 1)
            hosts_http = Http(host_call_port, deadline) if host_call_port is not None else web
            return run(jobs_flow(web, hosts_http,
                                 seeded["buyer_token"], seeded["job_tokens"], args.seconds,
                                 lease_wait_s=args.lease_wait_s, submit_batch=args.submit_batch,
                                 complete_batch=args.complete_batch,
                                 complete_wait_s=args.complete_wait_s))

        jobs = measured("jobs, submit -> complete" + (f" (run {n})" if n > 1 else ""), one_run,
                        stack, deadline=deadline)
        # The web's CPU per job: both servers' CPU over the phase / jobs completed.
        for components, key in ((("gunicorn_workers", "host_call_server"), "web_cpu_ms_per_job"),
                                (("gunicorn_workers",), "gunicorn_cpu_ms_per_job"),
                                (("host_call_server",), "host_call_server_cpu_ms_per_job"),
                                (("celery",), "celery_cpu_ms_per_job")):
            cpu_s = sum(jobs["cpu"]["cpu_s"][component] for component in components)
            jobs[key] = round(cpu_s * 1000 / max(1, jobs["completed"]), 2)
        if n == 1:
            result["jobs"] = jobs
            result["fold_latency"] = fold_latency()
            after = "jobs"
        else:
            result[f"jobs_run_{n}"] = jobs
            after = "second_jobs_run" if n == 2 else f"jobs_run_{n}"
        result[f"rss_mb_after_{after}"] = worker_rss_mb(stack.gunicorn.pid)
        result[f"celery_rss_mb_after_{after}"] = rss_mb(celery_pids(stack.celery))


def main() -> None:
    parser = build_parser()
    args = parser.parse_args()
    configuration = describe(args, parser)
    print("\n".join(configuration_lines(configuration)), file=sys.stderr, flush=True)
    if not args.migrated:
        recreate_database()
    seeded = seed(args.hosts)
    host_call_port = ((args.host_call_port or args.port + 1)
                      if "uvicorn" in (args.heartbeat_server, args.job_calls) else None)
    heartbeat_port = host_call_port if args.heartbeat_server == "uvicorn" else None
    stack = start_services(args, host_call_port)
    result: dict = {"configuration": configuration}
    try:
        time.sleep(1)
        result["rss_mb_start"] = worker_rss_mb(stack.gunicorn.pid)
        # warm every worker (imports, connections) and fill the cache's catalog ids
        warm = Deadline(2)
        run(heartbeats_closed(Http(args.port, warm, args.threads > 1), seeded["hb_tokens"][:200],
                              2, 8))
        if host_call_port is not None:
            run(heartbeats_closed(Http(host_call_port, warm), seeded["hb_tokens"][:200], 2, 8))
        result["rss_mb_warm"] = worker_rss_mb(stack.gunicorn.pid)
        if stack.host_call_server is not None:
            result["host_call_server_rss_mb_warm"] = rss_mb(stack.host_call_pids())
        if not args.only_jobs:
            lease_port = host_call_port if args.job_calls == "uvicorn" else None
            heartbeat_phases(args, stack, seeded, heartbeat_port, lease_port or args.port, result)
        if not args.skip_jobs:
            jobs_phases(args, stack, seeded, host_call_port if args.job_calls == "uvicorn"
                        else None, result)
    finally:
        stack.stop()
        with contextlib.suppress(Exception):  # made only when the heartbeat phases ran
            drop_pgbench()
    result["stalled_phases"] = [name for name, figures in result.items()
                                if isinstance(figures, dict) and figures.get("stalled")]
    result["load_average_1_5_15"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(result, indent=2))
    if args.json_out:
        args.json_out.write_text(json.dumps(result, indent=2))
    print("\n".join(summary_lines(result)), file=sys.stderr)


# --- what it prints (80 columns) -------------------------------------------------------------

WIDTH = 80
LABELS = {"load_generator": "client", "host_call_server": "host-call server",
          "gunicorn_workers": "gunicorn workers", "celery": "Celery", "postgresql": "PostgreSQL",
          "redis": "Redis", "other": "other"}


def wrapped(*texts: str) -> list[str]:
    """Each text as lines of at most WIDTH columns, the lines after its first indented."""
    return [line for text in texts
            for line in textwrap.wrap(text, WIDTH, subsequent_indent="    ",
                                      break_on_hyphens=False)]


def configuration_lines(configuration: dict) -> list[str]:
    s = configuration["settings"]
    shape = ("the production shape of docs/operations.md" if configuration["production_shape"]
             else "NOT the production shape: " + ", ".join(
                 _option(name, s[name]) for name in configuration["differs_from_production"]))
    web = (f"{s['server']}, {s['workers']} workers x {s['threads']} threads"
           if s["threads"] > 1 else f"{s['server']}, {s['workers']} sync workers")
    web = (web
           + (f" (gthread, {s['worker_connections']} connections each, keep-alive "
              f"{configuration['keep_alive_s']} s)" if s["threads"] > 1 and s["server"] == "gunicorn"
              else "")
           + f", DB_POOL_MAX_SIZE={s['pool']}, "
           f"NETWORK_WAITING_LEASES_PER_PROCESS={s['waiting_per_process']}")
    processes = s["host_call_workers"]
    server = f"the uvicorn host-call server, {processes} process{'es' if processes > 1 else ''}"
    heartbeats = server if s["heartbeat_server"] == "uvicorn" else "the web server's path"
    job_calls = ("the host-call server" if s["job_calls"] == "uvicorn"
                 else "the web server's path")
    clients = (f"{s['hosts']:,} heartbeating hosts ({s['heartbeat_connections']} connections); "
               f"{configuration['job_hosts']} job hosts x {configuration['slots_per_job_host']} "
               f"slots, leases waiting {s['lease_wait_s']:g} s, reports "
               + ("together" if s["complete_batch"] else "one by one")
               + (f", completions waiting {s['complete_wait_s']:g} s" if s["complete_wait_s"]
                  else ", completions not waiting")
               + f"; buyer batches of {s['submit_batch']}")
    return wrapped(f"configuration: {shape}.", f"  web: {web}.", f"  heartbeats: {heartbeats}.",
                   f"  job hosts' calls: {job_calls}.",
                   f"  Celery: {CELERY_LAYOUTS[s['celery']]}.", f"  clients: {clients}.",
                   f"  phases of {s['seconds']:g} s on {configuration['cpus']} CPUs; pgbench "
                   f"{configuration['pgbench_clients']} clients, scale {s['pgbench_scale']}.")


CELERY_LAYOUTS = {"split": "a folds worker and a passes worker, one thread each",
                  "shared": "one worker of two threads for folds and passes"}


def _option(name: str, value: object) -> str:
    """An option as it is typed: --pool 8, --no-complete-batch."""
    flag = name.replace("_", "-")
    if isinstance(value, bool):
        return f"--{flag}" if value else f"--no-{flag}"
    return f"--{flag} {value:g}" if isinstance(value, float) else f"--{flag} {value}"


def _at_least(figures: dict) -> str:
    return "at least " if figures.get("limited_by") == "client" else ""


def _headline(figures: dict) -> str:
    if "updates_per_s" in figures:
        return f"{figures['updates_per_s'] or 0:,.0f} UPDATEs/s"
    if "completed_per_s" in figures:
        return (f"{_at_least(figures)}{figures['completed_per_s']:,.1f} jobs/s, "
                f"{figures['completed']:,} completed")
    text = f"{_at_least(figures)}{figures['per_s']:,.0f}/s"
    if figures.get("target_rate"):
        text += f" of {figures['target_rate']:,.0f}/s asked"
    if figures.get("p99_ms") is not None:
        text += f", p50 {figures['p50_ms']} ms, p99 {figures['p99_ms']} ms"
    return text


def phase_lines(name: str, figures: dict) -> list[str]:
    """A phase's figure, what limited it, its CPU per component and whether it stalled."""
    cpu = figures["cpu"]
    shares = ", ".join(f"{LABELS[part]} {share:.0%}" for part, share
                       in cpu["share_of_cpus"].items() if share >= 0.005)
    if figures["limited_by"] == "client":
        limit = (f"limited by the client ({figures['load_generator_cores']:.2f} cores): a lower "
                 "bound of the server's figure")
    else:
        limit = f"limited by the server (busiest: {LABELS[figures['busiest']]})"
    lines = [f"{name}: {_headline(figures)}; {limit}.",
             f"  CPU, share of {os.cpu_count()} cores: {shares or 'none'}; idle "
             f"{cpu['idle_share']:.0%}" + (f", stolen {cpu['steal_share']:.0%}"
                                           if cpu["steal_share"] >= 0.005 else "") + "."]
    if figures.get("stalled"):
        lines.append(f"  STALLED: {figures.get('cut_off_at_deadline', 0):,} calls unanswered "
                     "at the deadline, given up.")
    return wrapped(*lines)


def summary_lines(result: dict) -> list[str]:
    lines = configuration_lines(result["configuration"])
    if "heartbeats_max" in result:
        closed, pgbench = result["heartbeats_max"], result["pgbench_single_row_update"]
        ratio = result.get("heartbeats_to_pgbench_ratio")
        lines += wrapped(
            f"heartbeats: {_at_least(closed)}{closed['per_s']:,.0f}/s at most against pgbench's "
            f"{pgbench['updates_per_s'] or 0:,.0f} single-row UPDATEs/s: ratio "
            f"{_at_least(closed)}{ratio if ratio is not None else 'unknown'} (goal >= 0.25); "
            f"{closed['server_cpu_ms_per_heartbeat']} ms of server CPU a heartbeat; a 401 "
            f"without the database {_at_least(result['floor_401'])}"
            f"{result['floor_401']['per_s']:,.0f}/s.")
        for key, title in (("heartbeats_at_1000_per_s", "at 1,000/s open loop"),
                           ("heartbeats_at_80pct_of_max", "at 80 % of the most, open loop")):
            figures = result.get(key)
            lines += wrapped(f"{title}: {_headline(figures)}"
                             + (" (goal < 50 ms)." if "80" in key else ".")
                             if figures else f"{title}: not run.")
        if "heartbeats_while_hosts_wait" in result:
            held = result["heartbeats_while_hosts_wait"]
            lines += wrapped(
                f"while {held['waiting_hosts']} hosts wait: heartbeats {held['per_s']}/s, "
                f"p99 {held['p99_ms']} ms; PostgreSQL connections "
                f"{result['database_connections_before_waiting']} before, "
                f"{held['database_connections_while_waiting']} while they wait; RSS "
                f"{result['rss_mb_while_hosts_waited']} MB.")
    if "jobs" in result:
        jobs, fold = result["jobs"], result["fold_latency"]
        lines += wrapped(
            f"jobs: {_headline(jobs)} submit -> complete (goal >= 200/s), "
            f"{jobs['http_calls_per_job']} calls and {jobs['web_cpu_ms_per_job']} ms of web CPU "
            f"a job (goal <= 5 ms: gunicorn's workers {jobs['gunicorn_cpu_ms_per_job']}, the "
            f"host-call server {jobs['host_call_server_cpu_ms_per_job']}); folds p99 "
            f"{fold.get('p99_ms')} ms, "
            f"{fold.get('within_5s_share')} within 5 s; {jobs['celery_cpu_ms_per_job']} ms of "
            f"Celery CPU a job; Celery RSS {result.get('celery_rss_mb_before_jobs')} -> "
            f"{result.get('celery_rss_mb_after_second_jobs_run') or result['celery_rss_mb_after_jobs']}"
            " MB.")
    limits = [f"{key} {figures['limited_by']}" + (" (stalled)" if figures.get("stalled") else "")
              for key, figures in result.items()
              if isinstance(figures, dict) and "limited_by" in figures]
    if limits:
        lines += wrapped("limited by: " + ", ".join(limits) + ".")
    end = (result.get("rss_mb_after_second_jobs_run") or result.get("rss_mb_after_jobs")
           or result.get("rss_mb_after_heartbeats"))
    if end and result.get("rss_mb_warm"):
        lines += wrapped(f"median web worker RSS: warm {statistics.median(result['rss_mb_warm']):.1f}"
                         f" MB, end {statistics.median(end):.1f} MB.")
    lines += wrapped(f"load average {result['load_average_1_5_15']} on {os.cpu_count()} CPUs.")
    return lines


if __name__ == "__main__":
    main()
