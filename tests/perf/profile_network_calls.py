"""CPU per network call, in-process. Not a test: run it by hand.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/tokvera_calls \\
    CACHE_URL=redis://127.0.0.1:6379/5 CELERY_BROKER_URL=redis://127.0.0.1:6379/4 \\
        .venv/bin/python tests/perf/profile_network_calls.py

Recreates the database named by DATABASE_URL, seeds 100 hosts (2 slots) and a buyer, and
measures the process's CPU per call through Django's test client (so: Django, the
middleware, DRF and the services, without gunicorn): heartbeat, its rate limit and its
UPDATE alone, an idle lease, a submission (with its assignment pass), a lease that finds an
assigned job, a complete with `lease_next`. Where bench_network.py says how fast the whole
box is, this says which call costs what.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tokvera_site.settings")
os.environ.setdefault("ALLOWED_HOSTS", "testserver")
os.environ.setdefault("DEBUG", "0")


def recreate_database() -> None:
    import psycopg

    url = urlsplit(os.environ["DATABASE_URL"])
    name = url.path.lstrip("/")
    with psycopg.connect(url._replace(path="/postgres").geturl(), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")


def cpu_ms_per_call(name: str, call, count: int) -> list:
    started = time.process_time()
    answers = [call(i) for i in range(count)]
    print(f"{name:34s} {(time.process_time() - started) / count * 1000:6.2f} ms CPU")
    return answers


def main() -> None:
    recreate_database()
    import django

    django.setup()
    import logging

    logging.disable(logging.WARNING)  # 401s and 429s would log a line each
    from django.conf import settings
    from django.core.management import call_command
    from django.test import Client

    from accounts import teams
    from benchmarks.network import catalog, hosts
    from common import ratelimit
    from tests.conftest import make_user
    from tokvera_site.celery import app

    call_command("migrate", verbosity=0)
    for name in ("NETWORK_HEARTBEAT_LIMIT", "NETWORK_LEASE_LIMIT", "NETWORK_SUBMIT_LIMIT",
                 "NETWORK_MAX_UNSETTLED_PER_TEAM"):
        setattr(settings, name, 10**9)  # measure the calls, not the limits
    app.conf.task_always_eager = True  # the fold runs in the completing call, as a worker would
    catalog.add_catalog_model("bench-q4", "Q4_K_M", 4096)
    operator = teams.create_team("ops", "Ops", owner=make_user("ops-owner"))
    buyer = teams.create_team("buyer", "Buyer", owner=make_user("buyer-owner"))
    _, buyer_token = teams.issue_token(buyer, "read-write")
    client = Client()

    def post(path: str, body: dict | None, token: str):
        return client.post(path, json.dumps(body or {}), content_type="application/json",
                           HTTP_AUTHORIZATION=f"Bearer {token}")

    tokens = []
    beat = {"models": ["bench-q4"], "slots": 2}
    for i in range(100):
        _, token = hosts.create_host(operator, f"rig-{i}", "software")
        tokens.append(token)
        assert post("/v1/hosts/heartbeat", beat, token).status_code == 200

    cpu_ms_per_call("heartbeat", lambda i: post("/v1/hosts/heartbeat", beat, tokens[i % 100]), 2000)
    cpu_ms_per_call("  its rate limit alone", lambda i: ratelimit.allow("x", "y", 10**9, 60), 2000)
    cpu_ms_per_call("  its UPDATE alone (hosts.heartbeat)",
                    lambda i: hosts.heartbeat(tokens[i % 100], ["bench-q4"], {}, 2), 2000)
    start = {"start": True}
    cpu_ms_per_call("idle lease (nothing queued)",
                    lambda i: post("/v1/hosts/lease", start, tokens[i % 100]), 300)
    job = {"model": "bench-q4", "max_tokens": 16, "messages": [{"role": "user", "content": "x"}]}
    submitted = cpu_ms_per_call("submit (and its pass)",
                                lambda i: post("/v1/jobs", job, buyer_token), 150)
    assert all(r.status_code == 202 for r in submitted)
    leased = cpu_ms_per_call("lease that finds a job (started)",
                             lambda i: post("/v1/hosts/lease", start, tokens[i % 100]), 100)
    held = [(i % 100, r.json()["id"]) for i, r in enumerate(leased) if r.status_code == 200]
    done = {"ttft_ms": 20.0, "completion_tokens": 16, "elapsed_ms": 80.0,
            "result": {"content": "x" * 64}, "lease_next": True}
    cpu_ms_per_call("complete with lease_next",
                    lambda k: post(f"/v1/jobs/{held[k][1]}/complete", done, tokens[held[k][0]]),
                    len(held))


if __name__ == "__main__":
    main()
