"""/healthz while maximum-size reports are pushed, and the CPU a push costs in the web request
and on the proof worker. Not a test: run it by hand.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/tokvera_pushperf \\
    CACHE_URL=redis://127.0.0.1:6379/11 CELERY_BROKER_URL=redis://127.0.0.1:6379/10 \\
        .venv/bin/python tests/perf/measure_push_load.py [--pushes 8] [--proof-concurrency 2]

Recreates the database named by DATABASE_URL; makes one genuine maximum-size report (a real scan
of `tokvera target`: 2,000 requests over levels 1, 4, 16, 64, padded by nothing, just under
REPORT_MAX_BYTES); starts gunicorn as docs/operations.md says (2 gthread workers × 8 threads)
and a proof worker (`-Q proofs`, prefork); pushes N copies at once (each differs by trailing
whitespace, so each is a new report with its own proof) while asking /healthz every 50 ms, and
keeps asking until the proof worker has given every verdict. Prints /healthz latency on a quiet
site, while the uploads are in flight and while the proof queue is full, and the CPU seconds per
push of the gunicorn workers (the request) and of the proof worker (the proof).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tokvera_site.settings")


def recreate_database() -> None:
    import psycopg

    url = urlsplit(os.environ["DATABASE_URL"])
    name = url.path.lstrip("/")
    with psycopg.connect(url._replace(path="/postgres").geturl(), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")


def max_size_report(limit: int) -> bytes:
    """A genuine report of 2,000 requests, its tokens per request chosen to land under `limit`."""
    from scans.grader import ScanPlan, run_scan
    from scans.grader.demo_server import TargetConfig, running_target
    from scans.grader.report import report_from_measurement

    tokens, body = 64, b""
    for _ in range(4):
        config = TargetConfig(ttft_ms=1, itl_ms=0, tokens=tokens, max_concurrency=64)
        with running_target(config) as (host, port):
            plan = ScanPlan(base_url=f"http://{host}:{port}/v1", model="tiny",
                            levels=(1, 4, 16, 64), requests=500, max_tokens=tokens)
            body = json.dumps(report_from_measurement(plan, run_scan(plan))).encode()
        print(f"report of 2,000 requests x {tokens} tokens: {len(body) / 2**20:.2f} MiB")
        if 0.9 * limit <= len(body) <= limit:
            return body
        tokens = max(8, int(tokens * 0.97 * limit / len(body)))
    if len(body) > limit:
        raise SystemExit("could not make a report under the size limit")
    return body


def cpu_s(procs) -> float:
    import psutil

    total = 0.0
    for proc in procs:
        try:
            times = proc.cpu_times()
            total += times.user + times.system
            for child in proc.children(recursive=True):
                c = child.cpu_times()
                total += c.user + c.system
        except psutil.NoSuchProcess:
            pass
    return total


def summary(name: str, samples: list[float]) -> None:
    if not samples:
        print(f"{name:44s} no samples")
        return
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]
    print(f"{name:44s} n={len(samples):4d} median {statistics.median(samples) * 1000:7.1f} ms  "
          f"p95 {p95 * 1000:7.1f} ms  max {max(samples) * 1000:7.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pushes", type=int, default=8)
    parser.add_argument("--proof-concurrency", type=int, default=2)
    args = parser.parse_args()
    recreate_database()
    import django

    django.setup()
    import httpx
    import psutil
    from django.core.cache import cache
    from django.core.management import call_command

    from accounts import teams
    from scans.models import Endpoint, Scan
    from scans.running import pushes
    from tests.helpers.processes import accepts, wait_for

    call_command("migrate", verbosity=0)
    cache.clear()
    body = max_size_report(pushes.limit("REPORT_MAX_BYTES") - args.pushes)
    report = json.loads(body)
    from django.contrib.auth import get_user_model

    owner = get_user_model().objects.create_user("perf-owner", "perf@example.test", "x" * 20)
    team = teams.create_team("perf", "Perf", owner=owner)
    token = teams.issue_token(team, "read-write")[1]
    endpoint = Endpoint.dangerously_unscoped.create(
        team=team, name="perf", base_url=report["target"]["base_url"], model="tiny",
        mode="pushed", levels=[1, 4, 16, 64])

    port = 18000 + os.getpid() % 1000
    env = {**os.environ, "DEBUG": "0", "ALLOWED_HOSTS": "127.0.0.1"}
    web = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "tokvera_site.wsgi", "--bind", f"127.0.0.1:{port}",
         "--workers", "2", "--worker-class", "gthread", "--threads", "8", "--keep-alive", "30",
         "--timeout", "120"], cwd=ROOT, env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "tokvera_site", "worker", "-Q", "proofs",
         "--pool", "prefork", "--concurrency", str(args.proof_concurrency), "-n",
         "proofs-perf@%h", "--without-gossip", "--without-mingle", "--without-heartbeat",
         "-l", "WARNING"], cwd=ROOT, env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    site = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: accepts(port), 60, "gunicorn")
        time.sleep(3)  # the worker's pool
        web_procs, worker_procs = [psutil.Process(web.pid)], [psutil.Process(worker.pid)]
        health = httpx.Client(base_url=site, timeout=120)

        def healthz() -> float:
            started = time.perf_counter()
            assert health.get("/healthz").status_code == 200
            return time.perf_counter() - started

        for _ in range(5):
            healthz()
        quiet = [healthz() for _ in range(40)]
        url = f"{site}/api/v1/endpoints/{endpoint.public_id}/reports"
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        bodies = [body + b" " * i for i in range(args.pushes)]
        answers: list[tuple[int, float]] = []
        gate = threading.Barrier(args.pushes + 1)

        def push(one: bytes) -> None:
            with httpx.Client(timeout=300) as client:
                gate.wait()
                started = time.perf_counter()
                status = client.post(url, content=one, headers=headers).status_code
                answers.append((status, time.perf_counter() - started))

        threads = [threading.Thread(target=push, args=(b,)) for b in bodies]
        for thread in threads:
            thread.start()
        web_cpu, worker_cpu = cpu_s(web_procs), cpu_s(worker_procs)
        gate.wait()
        uploading = []
        while any(t.is_alive() for t in threads):
            uploading.append(healthz())
            time.sleep(0.05)
        web_cpu = cpu_s(web_procs) - web_cpu
        queue_full = []
        scans = Scan.dangerously_unscoped.filter(endpoint=endpoint)
        proof_started = time.perf_counter()
        while scans.filter(status__in=["queued", "running"]).exists():
            queue_full.append(healthz())
            time.sleep(0.05)
        proof_wall = time.perf_counter() - proof_started
        worker_cpu = cpu_s(worker_procs) - worker_cpu
        verdicts = sorted(scans.values_list("status", flat=True))
        print(f"pushes: {args.pushes} x {len(body) / 2**20:.2f} MiB; answers "
              f"{sorted(s for s, _ in answers)}; verdicts {verdicts}")
        print(f"push request wall: median {statistics.median(w for _, w in answers):.2f} s, "
              f"max {max(w for _, w in answers):.2f} s")
        summary("/healthz on a quiet site", quiet)
        summary("/healthz while the pushes are in flight", uploading)
        summary("/healthz while the proof queue is full", queue_full)
        print(f"web CPU per push (gunicorn workers, incl. /healthz): "
              f"{web_cpu / args.pushes:.3f} s")
        print(f"proof CPU per push (proof worker): {worker_cpu / args.pushes:.2f} s; "
              f"{proof_wall:.1f} s wall for all {args.pushes} with concurrency "
              f"{args.proof_concurrency}")
    finally:
        for proc in (web, worker):
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()


if __name__ == "__main__":
    main()
