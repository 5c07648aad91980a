"""How far the scan page lags behind the worker ("the status lags ~12 s behind the
worker"). Not a test: run it by hand.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/tokvera_lagperf \\
    CACHE_URL=redis://127.0.0.1:6379/11 CELERY_BROKER_URL=redis://127.0.0.1:6379/10 \\
        .venv/bin/python tests/perf/measure_scan_page_lag.py [--scans 8]

Recreates the database named by DATABASE_URL; starts `tokvera target` (the demo's settings) and
one warmed-up worker as the run command starts it (threads pool, the production heartbeat of
SCAN_HEARTBEAT_S); then, one scan at a time (scan now), reads the scan's status.json the way
the page does, every 50 ms, and records when it first says running, when the worker's figures
first appear and change, and when it says finished, against the row's own started_at and
finished_at, and how long the finished page (the one reload) takes to render. Prints medians
and maxima in seconds. The page itself polls every 1 s while a
scan runs (static/scan-status.js), so a person sees each of these at most about 1 s later.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scans", type=int, default=8)
    args = parser.parse_args()
    recreate_database()
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    call_command("createcachetable", verbosity=0)
    from django.contrib.auth import get_user_model
    from django.test import Client

    from accounts import teams
    from scans.grader.demo_server import MODEL_ID, TargetConfig, running_target
    from scans.models import Endpoint, Scan, ScanTrigger
    from scans.running import dispatch
    from tokvera_site.celery import app

    owner = get_user_model().objects.create_user("lag", "lag@example.test", "x" * 20)
    team = teams.create_team("lag", "Lag", owner=owner)
    client = Client(HTTP_HOST="127.0.0.1")
    client.force_login(owner)
    app.control.purge()
    env = {**os.environ, "OUTBOUND_ALLOW": "loopback"}
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "tokvera_site",
            "worker",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "-l",
            "WARNING",
        ],
        cwd=ROOT,
        env=env,
        start_new_session=True,
    )
    rows = []
    try:
        # The demo target's settings (Procfile.dev) and the demo endpoint's profile.
        config = TargetConfig(ttft_ms=180, itl_ms=15, jitter_ms=40, tokens=48, max_concurrency=8)
        with running_target(config) as (_, port):
            for n in range(args.scans + 1):  # the first warms the worker up and is not counted
                endpoint = Endpoint.dangerously_unscoped.create(
                    team=team,
                    name=f"lag {n}",
                    base_url=f"http://127.0.0.1:{port}/v1",
                    model=MODEL_ID,
                    levels=[1, 4, 8],
                    requests_per_level=12,
                    max_tokens=48,
                    timeout_s=30,
                )
                scan = dispatch.scan_now(endpoint, ScanTrigger.MANUAL)
                url = f"/scans/{scan.public_id}/status.json"
                seen: dict[str, float] = {}
                texts: list[str] = []
                while True:
                    status = client.get(url).json()
                    now = time.time()
                    if status["status"] == "running":
                        seen.setdefault("running", now)
                    if status["live_text"] and (not texts or texts[-1] != status["live_text"]):
                        texts.append(status["live_text"])
                        seen.setdefault("figures", now)
                    if status["finished"]:
                        seen["finished"] = now
                        break
                    time.sleep(0.05)
                began = time.perf_counter()
                client.get(f"/scans/{scan.public_id}/")  # the page's one reload at the end
                reload_s = time.perf_counter() - began
                row = Scan.dangerously_unscoped.get(pk=scan.pk)
                if n == 0:
                    continue
                rows.append(
                    {
                        "queued_to_started": (row.started_at - row.queued_at).total_seconds(),
                        "started_to_seen_running": seen["running"] - row.started_at.timestamp(),
                        "started_to_first_figures": seen["figures"] - row.started_at.timestamp(),
                        "figure_changes": len(texts),
                        "finished_to_seen_finished": seen["finished"] - row.finished_at.timestamp(),
                        "finished_page_render_s": reload_s,
                        "scan_s": (row.finished_at - row.started_at).total_seconds(),
                    }
                )
    finally:
        worker.terminate()
        worker.wait(timeout=60)
    print(f"{len(rows)} scans (levels 1, 4, 8 x 12 requests against the demo target):")
    for key in rows[0]:
        values = [r[key] for r in rows]
        print(f"  {key:28} median {statistics.median(values):7.2f}   max {max(values):7.2f}")


if __name__ == "__main__":
    main()
