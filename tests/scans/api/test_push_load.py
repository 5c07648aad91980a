"""Issue 19, finding 2: eight maximum-size pushes in flight at once no longer take every web
thread. Under gunicorn (gthread, the production shape of docs/operations.md) with a real proof
worker, /healthz is answered while the pushes are being uploaded and stored, every push is taken
(202), and the proof worker then gives each its verdict. No timing is asserted here; the figures
are measured by tests/perf/measure_push_load.py (DECISIONS.md)."""

from __future__ import annotations

import json
import threading

import httpx
import pytest

from scans.models import Scan
from scans.running import pushes
from tests.conftest import clear_cache
from tests.helpers import workers
from tests.helpers.factories import make_endpoint, measured_report
from tests.helpers.processes import gunicorn, wait_for
from tests.helpers.workers import stop, worker_env
from tokvera_site.celery import app

pytestmark = [pytest.mark.redis, pytest.mark.django_db(transaction=True)]

IN_FLIGHT = 8


def _max_size_bodies(endpoint, count: int) -> list[bytes]:
    """`count` different reports just under REPORT_MAX_BYTES (a real report, padded)."""
    report = measured_report()
    report["target"]["base_url"] = endpoint.base_url
    bodies = []
    for i in range(count):
        report["measurements"]["padding"] = ""
        room = pushes.limit("REPORT_MAX_BYTES") - len(json.dumps(report).encode()) - 16
        report["measurements"]["padding"] = f"{i:04d}" + "x" * room
        bodies.append(json.dumps(report).encode())
    return bodies


def test_healthz_answers_while_eight_maximum_size_pushes_are_in_flight(world):
    clear_cache()  # the team's byte budget is keyed by its id, which a new test database reuses
    app.control.purge()
    endpoint = make_endpoint(world.team, mode="pushed")
    bodies = _max_size_bodies(endpoint, IN_FLIGHT)
    assert all(len(b) <= pushes.limit("REPORT_MAX_BYTES") for b in bodies)
    proofs = workers.start("-Q", "proofs", "--pool", "prefork", "--concurrency", "1",
                          "-n", "proofs-load@%h")
    try:
        with gunicorn(worker_env(DEBUG="0", ALLOWED_HOSTS="127.0.0.1"), workers=2, threads=8,
                      timeout_s=120) as site:
            url = f"{site}/api/v1/endpoints/{endpoint.public_id}/reports"
            headers = {"Authorization": f"Bearer {world.read_write_token}",
                       "Content-Type": "application/json"}
            answers: list[int] = []
            started = threading.Barrier(IN_FLIGHT + 1)

            def push(body: bytes) -> None:
                with httpx.Client(timeout=120) as client:
                    started.wait()
                    answers.append(client.post(url, content=body, headers=headers).status_code)

            threads = [threading.Thread(target=push, args=(b,)) for b in bodies]
            for thread in threads:
                thread.start()
            started.wait()
            health = []
            with httpx.Client(base_url=site, timeout=60) as client:
                while any(t.is_alive() for t in threads) or not health:
                    response = client.get("/healthz")
                    health.append((response.status_code, response.json()["status"]))
            for thread in threads:
                thread.join()
        assert answers == [202] * IN_FLIGHT
        assert set(health) == {(200, "ok")}
        scans = Scan.dangerously_unscoped.filter(endpoint=endpoint)
        wait_for(lambda: not scans.filter(status__in=["queued", "running"]).exists(), 300,
                 "the proof worker's verdicts")
        assert scans.count() == IN_FLIGHT
        assert set(scans.values_list("status", flat=True)) <= {"succeeded", "refused"}
    finally:
        stop(proofs)
