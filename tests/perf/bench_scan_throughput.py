"""Scheduled-scan throughput of the run command's worker. Not part of the suite.

N endpoints (default 1,000) spread over several `tokvera target` origins on loopback (default
profile: levels 1/4/16, the target's default timing), all due at once, so the worker works
through a backlog for the whole window: completed scans in the window, extrapolated to an
hour, are its capacity. It runs the worker line of Procfile.dev unchanged (threads pool,
SCAN_CONCURRENCY_PER_WORKER scans at once) and plays the beat itself (the beat's tasks sent
every 60 s, as `celery beat` would). Reports: scans/hour, share of levels marked client-bound,
the worker's peak RSS (parent and children), and the load average.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/tokvera_bench \\
    CELERY_BROKER_URL=redis://127.0.0.1:6379/2 \\
        .venv/bin/python tests/perf/bench_scan_throughput.py --endpoints 1000 --origins 24 --minutes 6

The database named by DATABASE_URL is migrated and gets one team ("scan-throughput bench"),
deleted again at the end. The broker's queues are purged at the start.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tokvera_site.settings")
os.environ.setdefault("OUTBOUND_ALLOW", "loopback")


def worker_command() -> list[str]:
    """The worker line of Procfile.dev, as `make run` starts it."""
    for line in (ROOT / "Procfile.dev").read_text().splitlines():
        if line.startswith("worker:"):
            return shlex.split(line.split(":", 1)[1])
    raise SystemExit("Procfile.dev has no worker line")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_port(port: int, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"target on port {port} did not start")


def tree_rss_mb(pid: int) -> float:
    import psutil

    try:
        parent = psutil.Process(pid)
        procs = [parent, *parent.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0
    total = 0
    for proc in procs:
        try:
            total += proc.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total / 2**20


def cpu_seconds(pid: int) -> float:
    import psutil

    try:
        times = psutil.Process(pid).cpu_times()
    except psutil.NoSuchProcess:
        return 0.0
    return times.user + times.system


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoints", type=int, default=1000)
    parser.add_argument("--origins", type=int, default=24,
                        help="tokvera target processes (one scan per origin at a time)")
    parser.add_argument("--minutes", type=float, default=6.0, help="measured window")
    parser.add_argument("--warmup-s", type=float, default=60.0)
    parser.add_argument("--streams", type=int, default=None,
                        help="the worker's SCAN_STREAMS_PER_WORKER (default: the setting's "
                             "default; a large number turns the stream budget off)")
    args = parser.parse_args()

    import django

    django.setup()
    from django.core.management import call_command
    from django.db.models import Count, Q
    from django.utils import timezone

    from accounts.models import Team
    from scans.models import Endpoint, Scan, ScanStatus
    from scans.tasks import enqueue_due_scans, reap_scans
    from tokvera_site.celery import app

    call_command("migrate", verbosity=0)
    app.control.purge()
    # The bench's own team, whatever was left by an interrupted run.
    Team.dangerously_unscoped.filter(name="scan-throughput bench").delete()
    team = Team.dangerously_unscoped.create(name="scan-throughput bench",
                                            slug=f"bench-{int(time.time())}")

    procs: list[subprocess.Popen] = []
    worker = None
    try:
        ports = []
        for _ in range(args.origins):
            port = free_port()
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "tokvera_site.cli", "target", "--port", str(port)],
                cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            ports.append(port)
        for port in ports:
            wait_for_port(port)
        due = timezone.now() - timedelta(seconds=5)
        Endpoint.dangerously_unscoped.bulk_create(
            Endpoint(team=team, name=f"bench {i}", model="m", interval_minutes=60,
                     base_url=f"http://127.0.0.1:{ports[i % len(ports)]}/v1",
                     levels=[1, 4, 16], next_scan_at=due)
            for i in range(args.endpoints))

        env = {**os.environ, "OUTBOUND_ALLOW": "loopback"}
        if args.streams is not None:
            env["SCAN_STREAMS_PER_WORKER"] = str(args.streams)
        worker = subprocess.Popen(worker_command(), cwd=ROOT, env=env, start_new_session=True,
                                  stdout=subprocess.DEVNULL, stderr=open("/tmp/bench_worker.log", "w"))
        procs.append(worker)
        started = time.monotonic()
        window_start = window_end = None
        peak_rss = 0.0
        loads = []
        next_beat = 0.0
        total_s = args.warmup_s + args.minutes * 60
        while time.monotonic() - started < total_s:
            now = time.monotonic()
            if now >= next_beat:  # what `celery beat` sends every minute
                enqueue_due_scans.delay()
                reap_scans.delay()
                next_beat = now + 60
            if window_start is None and now - started >= args.warmup_s:
                window_start = timezone.now()
                cpu_at_start = cpu_seconds(worker.pid)
            peak_rss = max(peak_rss, tree_rss_mb(worker.pid))
            loads.append(os.getloadavg()[0])
            time.sleep(5)
        window_end = timezone.now()
        worker_cpu = cpu_seconds(worker.pid) - cpu_at_start

        mine = Scan.dangerously_unscoped.filter(endpoint__team=team)
        done = mine.filter(finished_at__gte=window_start, finished_at__lt=window_end)
        counts = dict(done.values_list("status").annotate(n=Count("pk")))
        levels = bound = 0
        by_level: dict[int, list[int]] = {}
        for report in done.filter(status=ScanStatus.SUCCEEDED).values_list("report", flat=True):
            for level in report.get("levels", []):
                levels += 1
                bound += bool(level.get("client_bound"))
                counts_of = by_level.setdefault(level.get("concurrency"), [0, 0])
                counts_of[0] += 1
                counts_of[1] += bool(level.get("client_bound"))
        hours = (window_end - window_start).total_seconds() / 3600
        running_peak = mine.filter(Q(status=ScanStatus.RUNNING)).count()
        succeeded = counts.get(ScanStatus.SUCCEEDED, 0)
        print(f"window: {(window_end - window_start).total_seconds():.0f} s after "
              f"{args.warmup_s:.0f} s warm-up; {args.endpoints} endpoints on {args.origins} origins")
        print(f"worker: {' '.join(worker_command())} (SCAN_STREAMS_PER_WORKER="
              f"{env.get('SCAN_STREAMS_PER_WORKER', 'default')})")
        print(f"completed scans: {sum(counts.values())} ({counts}); "
              f"scans/hour (extrapolated): {succeeded / hours:.0f}")
        print(f"levels: {levels}, client-bound: {bound} ({100 * bound / max(levels, 1):.2f} %); "
              "by concurrency: " + ", ".join(f"{c}: {b}/{n}" for c, (n, b) in sorted(by_level.items())))
        print(f"worker peak RSS (all its processes): {peak_rss:.0f} MB; worker CPU in the window: "
              f"{worker_cpu:.0f} s ({worker_cpu / max(succeeded, 1):.2f} CPU-s per scan, "
              f"{100 * worker_cpu / (hours * 3600):.0f} % of one core)")
        print(f"load average (1 min) during the run: mean {sum(loads) / len(loads):.2f}, "
              f"max {max(loads):.2f}; CPUs: {os.cpu_count()}; running at the end: {running_peak}")
        errored = list(done.filter(status=ScanStatus.ERRORED).values_list("error_reason", flat=True)[:3])
        if errored:
            print("errored, e.g.:", *errored, sep="\n  ")
    finally:
        # The worker first (its running scans die with it: the bench's team is deleted next),
        # then the targets.
        for proc in reversed(procs):
            try:
                if proc is worker:
                    os.killpg(proc.pid, signal.SIGKILL)
                else:
                    proc.terminate()
                proc.wait(timeout=60)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                proc.kill()
        app.control.purge()
        Team.dangerously_unscoped.filter(pk=team.pk).delete()


if __name__ == "__main__":
    main()
