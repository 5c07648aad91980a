"""How many liveness probes one worker process sustains, and whether its memory stays flat.
Not collected by pytest; run by hand against a scratch database:

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/tokvera_bench_probes \\
    OUTBOUND_ALLOW=loopback CACHE_URL=redis://127.0.0.1:6379/9 \\
    CELERY_BROKER_URL=redis://127.0.0.1:6379/8 \\
        .venv/bin/python tests/perf/bench_probes.py --endpoints 10000 --rounds 5

The issue's bar: one worker process sustains at least 200 probes a second against loopback
targets with flat memory (10,000 endpoints probed every minute from one box).

Loopback targets run in a child process (so their CPU is not the prober's; it is reported
apart, since prober, targets and PostgreSQL share the box): raw asyncio HTTP/1.1 servers on
`--ports` ports of 127.0.0.1, keep-alive, answering `GET /v1/models` (model "bench") and
`POST /v1/chat/completions` with a short SSE stream (two content chunks, a usage chunk,
[DONE]) in chunked transfer encoding. `--target tokvera` runs one `tokvera target` per port
instead (--ttft-ms 0 --itl-ms 0 --tokens 2), to compare.

Builds (once; --rebuild to redo) `--endpoints` endpoints in `--teams` teams, spread over the
ports. Each round then probes every endpoint once, as one Celery worker does it: it calls
scans.liveness.worker.probe_batch(ids, "site") in batches of dispatch.BATCH ids, in this
process, without Celery (read the endpoints, probe_many through the outbound guard, record).
Per round: wall and CPU seconds, probes/s, the process's RSS after the round, the split of
the wall time between probing (probe_many) and recording (record.record), the rows written
and how the probes ended, the targets' CPU seconds and the box's CPU busy share. Round 1
of a fresh build creates every endpoint's LivenessState and evaluates its first verdict
(unknown to up, several queries an endpoint: `first_verdicts`), so the steady figures are
those of the rounds without first verdicts. Prints one JSON object at the end.

`meets_goal`: the median probes/s of the steady rounds is at least 200 and the RSS after the
last round is at most 10% above the RSS after round 1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tokvera_site.settings")
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/tokvera_bench_probes")

GOAL_PROBES_PER_S = 200
FLAT_RSS_RATIO = 1.10
TEAM_PREFIX = "bench-probes-"
LOCATION = "site"
MODEL = "bench"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")

# --- the loopback target (the child process: no Django) -------------------------------------

_MODELS_BODY = json.dumps({"object": "list",
                           "data": [{"id": MODEL, "object": "model"}]}).encode()


def _sse_body() -> bytes:
    def chunk(delta: dict, finish: str | None = None, usage: dict | None = None) -> bytes:
        event = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 0,
                 "model": MODEL,
                 "choices": [] if usage else [{"index": 0, "delta": delta,
                                               "finish_reason": finish}]}
        if usage:
            event["usage"] = usage
        data = b"data: " + json.dumps(event).encode() + b"\n\n"
        return b"%x\r\n%s\r\n" % (len(data), data)

    done = b"data: [DONE]\n\n"
    return b"".join([
        chunk({"role": "assistant", "content": "ok"}),
        chunk({"content": "ok"}, finish="stop"),
        chunk({}, usage={"prompt_tokens": 8, "completion_tokens": 2, "total_tokens": 10}),
        b"%x\r\n%s\r\n" % (len(done), done),
        b"0\r\n\r\n",
    ])


_MODELS_RESPONSE = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    b"Content-Length: %d\r\nConnection: keep-alive\r\n\r\n%s"
                    % (len(_MODELS_BODY), _MODELS_BODY))
_CHAT_RESPONSE = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                  b"Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n"
                  b"Connection: keep-alive\r\n\r\n" + _sse_body())
_NOT_FOUND = (b"HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nContent-Length: 9\r\n"
              b"Connection: keep-alive\r\n\r\nnot found")


class _Target(asyncio.Protocol):
    """HTTP/1.1 keep-alive, requests with a Content-Length (or chunked) body, one at a time."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.buffer = bytearray()

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            lines = bytes(self.buffer[:end]).split(b"\r\n")
            method, path = (lines[0].split(b" ") + [b"", b""])[:2]
            length, chunked, close = 0, False, False
            for line in lines[1:]:
                name, _, value = line.partition(b":")
                name, value = name.strip().lower(), value.strip().lower()
                if name == b"content-length":
                    length = int(value)
                elif name == b"transfer-encoding" and b"chunked" in value:
                    chunked = True
                elif name == b"connection" and value == b"close":
                    close = True
            if chunked:
                last = self.buffer.find(b"0\r\n\r\n", end + 4)
                if last < 0:
                    return
                size = last + 5
            else:
                size = end + 4 + length
                if len(self.buffer) < size:
                    return
            del self.buffer[:size]
            if method == b"GET" and path.startswith(b"/v1/models"):
                self.transport.write(_MODELS_RESPONSE)  # type: ignore[attr-defined]
            elif method == b"POST" and path.startswith(b"/v1/chat/completions"):
                self.transport.write(_CHAT_RESPONSE)  # type: ignore[attr-defined]
            else:
                self.transport.write(_NOT_FOUND)  # type: ignore[attr-defined]
            if close:
                self.transport.close()
                return


async def _serve(ports: int) -> None:
    loop = asyncio.get_running_loop()
    servers = [await loop.create_server(_Target, "127.0.0.1", 0, backlog=4096)
               for _ in range(ports)]
    print(json.dumps([s.sockets[0].getsockname()[1] for s in servers]), flush=True)
    await asyncio.Event().wait()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_listening(port: int, deadline: float) -> None:
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def start_targets(kind: str, ports: int) -> tuple[list[subprocess.Popen], list[int]]:
    """The target processes and their ports."""
    if kind == "raw":
        proc = subprocess.Popen([sys.executable, __file__, "--serve", "--ports", str(ports)],
                                stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        return [proc], json.loads(proc.stdout.readline())
    tokvera = str(Path(sys.executable).with_name("tokvera"))
    numbers = [_free_port() for _ in range(ports)]
    procs = [subprocess.Popen([tokvera, "target", "--port", str(port), "--ttft-ms", "0",
                               "--itl-ms", "0", "--tokens", "2", "--no-metrics"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for port in numbers]
    deadline = time.monotonic() + 30
    for port in numbers:
        _wait_listening(port, deadline)
    return procs, numbers


def _cpu_of(pid: int) -> float:
    """User plus system CPU seconds of a process (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _box_cpu() -> tuple[int, int]:
    """(busy, total) jiffies of the whole box."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = values[3] + values[4]  # idle, iowait
    return sum(values) - idle, sum(values)


# --- the prober's side (Django) ---------------------------------------------------------------

def _ensure_database() -> None:
    import psycopg
    from django.db import connection

    params = {**connection.get_connection_params(), "dbname": "postgres", "autocommit": True}
    params.pop("cursor_factory", None)
    name = connection.settings_dict["NAME"]
    with psycopg.connect(**params) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')


def _bench_endpoints():
    from scans.models import Endpoint

    return Endpoint.dangerously_unscoped.filter(team__slug__startswith=TEAM_PREFIX)


def build(endpoints: int, teams: int) -> None:
    from accounts.models import Team
    from scans.models import Endpoint, LivenessState, ProbeHour, ProbeResult

    old = list(Team.dangerously_unscoped.filter(slug__startswith=TEAM_PREFIX)
               .values_list("pk", flat=True))
    if old:  # the bulky children first, in one statement each (no per-row cascade)
        for model in (ProbeResult, ProbeHour, LivenessState):
            model.dangerously_unscoped.filter(endpoint__team_id__in=old)._raw_delete(
                model.dangerously_unscoped.db)
        Team.dangerously_unscoped.filter(pk__in=old).delete()
    made = [Team.dangerously_unscoped.create(name=f"Bench probes {t}", slug=f"{TEAM_PREFIX}{t}")
            for t in range(teams)]
    Endpoint.dangerously_unscoped.bulk_create(
        (Endpoint(team=made[i % teams], name=f"probe target {i}",
                  base_url="http://127.0.0.1:9/v1", model=MODEL, levels=[1], timeout_s=15.0)
         for i in range(endpoints)),
        batch_size=1000)
    print(f"built {endpoints} endpoints in {teams} teams", file=sys.stderr, flush=True)


def point_at(ports: list[int]) -> None:
    """Every bench endpoint at one of the targets' ports (by id, so a batch spans them all)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            """UPDATE scans_endpoint SET base_url = 'http://127.0.0.1:'
                   || ((%s::int[])[1 + id %% %s])::text || '/v1'
               WHERE team_id IN (SELECT id FROM accounts_team WHERE slug LIKE %s)""",
            [ports, len(ports), TEAM_PREFIX + "%"])


class _Timer:
    """Wall and CPU seconds spent inside the wrapped calls (probe_many, record.record)."""

    def __init__(self) -> None:
        self.wall = self.cpu = 0.0

    def wrap_async(self, fn):
        async def timed(*args, **kwargs):
            wall, cpu = time.perf_counter(), time.process_time()
            try:
                return await fn(*args, **kwargs)
            finally:
                self.wall += time.perf_counter() - wall
                self.cpu += time.process_time() - cpu
        return timed

    def wrap(self, fn):
        def timed(*args, **kwargs):
            wall, cpu = time.perf_counter(), time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                self.wall += time.perf_counter() - wall
                self.cpu += time.process_time() - cpu
        return timed


def run_rounds(rounds: int, target_pids: list[int]) -> list[dict]:
    from django.db.models import Count
    from django.utils import timezone

    from scans.liveness import dispatch, record, worker
    from scans.models import LivenessState, ProbeResult

    probing, recording = _Timer(), _Timer()
    worker.probe_many = probing.wrap_async(worker.probe_many)
    record.record = recording.wrap(record.record)
    ids = list(_bench_endpoints().order_by("pk").values_list("pk", flat=True))
    results = []
    for number in range(1, rounds + 1):
        probing.wall = probing.cpu = recording.wall = recording.cpu = 0.0
        since = timezone.now()
        states = LivenessState.dangerously_unscoped.filter(
            location=LOCATION, endpoint__team__slug__startswith=TEAM_PREFIX)
        standing = states.count()
        target_cpu = sum(_cpu_of(pid) for pid in target_pids)
        box = _box_cpu()
        wall, cpu = time.perf_counter(), time.process_time()
        probed = 0
        for start in range(0, len(ids), dispatch.BATCH):
            probed += worker.probe_batch(ids[start:start + dispatch.BATCH], LOCATION)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        target_cpu = sum(_cpu_of(pid) for pid in target_pids) - target_cpu
        busy, total = (now - then for now, then in zip(_box_cpu(), box, strict=True))
        rss = _rss_mb()
        written = ProbeResult.dangerously_unscoped.filter(
            at__gte=since, location=LOCATION, endpoint__team__slug__startswith=TEAM_PREFIX)
        ends = Counter({(ok, kind or "ok"): n for ok, kind, n in written.values(
            "ok", "kind").annotate(n=Count("pk")).values_list("ok", "kind", "n")})
        row = {
            "round": number,
            "probed": probed,
            "first_verdicts": states.count() - standing,
            "wall_s": round(wall, 2),
            "probes_per_s": round(probed / wall, 1),
            "cpu_s": round(cpu, 2),
            "cpu_per_probe_ms": round(cpu * 1000 / max(probed, 1), 3),
            "rss_mb": round(rss, 1),
            "probe_many_wall_s": round(probing.wall, 2),
            "probe_many_cpu_s": round(probing.cpu, 2),
            "record_wall_s": round(recording.wall, 2),
            "record_cpu_s": round(recording.cpu, 2),
            "other_wall_s": round(wall - probing.wall - recording.wall, 2),
            "probe_results_written": sum(ends.values()),
            "ok": sum(n for (ok, _), n in ends.items() if ok),
            "not_ok_by_kind": {kind: n for (ok, kind), n in ends.items() if not ok},
            "target_cpu_s": round(target_cpu, 2),
            "box_cpu_busy_share": round(busy / max(total, 1), 3),
        }
        results.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    return results


def table_rows() -> dict:
    from django.db import connection

    out = {}
    with connection.cursor() as cursor:
        for table in ("scans_proberesult", "scans_probehour", "scans_livenessstate"):
            cursor.execute(f"SELECT count(*), pg_total_relation_size(%s) FROM {table}",  # noqa: S608
                           [table])
            count, size = cursor.fetchone()
            out[table] = {"rows": count, "mb": round(size / 2**20, 1)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoints", type=int, default=10_000)
    parser.add_argument("--teams", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--ports", type=int, default=8, help="target ports (origins)")
    parser.add_argument("--target", choices=("raw", "tokvera"), default="raw")
    parser.add_argument("--rebuild", action="store_true")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:  # the child: the raw target servers
        asyncio.run(_serve(args.ports))
        return
    os.environ.setdefault("OUTBOUND_ALLOW", "loopback")
    procs, ports = start_targets(args.target, args.ports)
    try:
        import django

        django.setup()
        _ensure_database()
        from django.conf import settings
        from django.core.management import call_command

        from scans.liveness.dispatch import BATCH

        if "loopback" not in settings.OUTBOUND_ALLOW:
            sys.exit("OUTBOUND_ALLOW must include loopback (the guard refuses 127.0.0.1)")
        call_command("migrate", verbosity=0)
        existing = _bench_endpoints().count()
        if args.rebuild or existing != args.endpoints:
            build(args.endpoints, args.teams)
        point_at(ports)
        pids = [p.pid for p in procs]
        rounds = run_rounds(args.rounds, pids)
        target_cpu_total = sum(_cpu_of(pid) for pid in pids)
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=10)
    steady = [r for r in rounds if not r["first_verdicts"]] or rounds
    median = statistics.median(r["probes_per_s"] for r in steady)
    rss_first, rss_last = rounds[0]["rss_mb"], rounds[-1]["rss_mb"]
    ratio = rss_last / rss_first if rss_first else 0.0
    print(json.dumps({
        "endpoints": args.endpoints,
        "teams": args.teams,
        "rounds": args.rounds,
        "batch": BATCH,
        "target": args.target,
        "target_ports": len(ports),
        "per_round": rounds,
        "median_probes_per_s": median,
        "median_probes_per_s_all_rounds": statistics.median(r["probes_per_s"] for r in rounds),
        "median_cpu_per_probe_ms": statistics.median(r["cpu_per_probe_ms"] for r in steady),
        "rss_mb_first": rss_first,
        "rss_mb_last": rss_last,
        "rss_ratio": round(ratio, 3),
        "target_cpu_s": round(sum(r["target_cpu_s"] for r in rounds), 2),
        "target_cpu_s_process_total": round(target_cpu_total, 2),
        "tables": table_rows(),
        "loadavg": [round(x, 2) for x in os.getloadavg()],
        "cpus": os.cpu_count(),
        "goal_probes_per_s": GOAL_PROBES_PER_S,
        "meets_rate": median >= GOAL_PROBES_PER_S,
        "memory_flat": ratio <= FLAT_RSS_RATIO,
        "meets_goal": median >= GOAL_PROBES_PER_S and ratio <= FLAT_RSS_RATIO,
    }, indent=2))


if __name__ == "__main__":
    main()
