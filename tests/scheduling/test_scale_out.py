"""Several machines on one box: two web processes (gunicorn) and two workers serving different
scan locations under different host names (-n), one PostgreSQL and one Redis. Endpoints are
created through both web processes with their locations; two beats fire at once. Every scan
runs exactly once, in its own location's queue; scans of one origin never overlap, whichever
worker runs them; a scan sent to another location's queue is not run there."""

from __future__ import annotations

import itertools
import re
import subprocess
import sys
from contextlib import ExitStack, contextmanager

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from accounts.models import TokenScope
from accounts.teams import issue_token
from scans import scanning
from scans.grader.target import TargetConfig, running_target
from scans.models import Endpoint, OriginLock, Scan, ScanStatus
from scans.tasks import run_scan
from tests.conftest import free_port
from tests.processes import accepts
from tests.scheduling.workers import ROOT, start_worker, stop, wait_for, worker_env
from tokvera_site.celery import app

pytestmark = [pytest.mark.redis, pytest.mark.django_db(transaction=True)]
LOCATIONS = "site,eu"


@pytest.fixture(autouse=True)
def _two_locations(settings):
    settings.SCAN_LOCATIONS = LOCATIONS.split(",")
    app.control.purge()
    with app.connection_for_write() as conn:  # a queue no worker of the test settings reads
        conn.default_channel.queue_purge("scans.eu")
    yield
    app.control.purge()


@contextmanager
def _web(env: dict):
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "tokvera_site.wsgi", "--bind", f"127.0.0.1:{port}",
         "--workers", "1", "--timeout", "60"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: accepts(port), 60, f"gunicorn on port {port}")
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _requests_answered(host: str, port: int) -> float:
    text = httpx.get(f"http://{host}:{port}/metrics").text
    for family in text_string_to_metric_families(text):
        if family.name == "tokvera_target_requests":
            return sum(s.value for s in family.samples if s.name.endswith("_total"))
    return 0.0


def _create(web: str, token: str, name: str, base_url: str, locations: list[str]) -> httpx.Response:
    return httpx.post(f"{web}/api/v1/endpoints/", headers={"Authorization": f"Bearer {token}"},
                      json={"name": name, "base_url": base_url, "model": "m", "levels": [1],
                            "requests_per_level": 2, "max_tokens": 16, "timeout_s": 30,
                            "interval_minutes": 60, "locations": locations}, timeout=30)


def _succeeded_runs(log_path) -> int:
    return len(re.findall(r"run_scan\[[^\]]+\] succeeded in [0-9.]+s: 'succeeded'",
                          log_path.read_text()))


def test_two_webs_and_two_located_workers_run_every_scan_once_in_its_location(world, tmp_path):
    _, token = issue_token(world.team, TokenScope.READ_WRITE)
    env = worker_env(SCAN_LOCATIONS=LOCATIONS, DEBUG="0", ALLOWED_HOSTS="127.0.0.1")
    config = TargetConfig(ttft_ms=700, itl_ms=5, tokens=8)  # each scan lasts a few seconds
    with ExitStack() as stack:
        (host_a, port_a), (host_b, port_b) = (stack.enter_context(running_target(config))
                                              for _ in range(2))
        shared, alone = f"http://{host_a}:{port_a}/v1", f"http://{host_b}:{port_b}/v1"
        web_1, web_2 = stack.enter_context(_web(env)), stack.enter_context(_web(env))

        refused = _create(web_1, token, "nowhere", alone, ["mars"])
        assert refused.status_code == 400
        assert "unknown location 'mars'" in refused.text and "site, eu" in refused.text
        for web, name, url, locations in [
            (web_1, "both places", shared, ["site", "eu"]),
            (web_2, "from eu", shared, ["eu"]),
            (web_2, "default place", shared, []),
            (web_1, "other origin", alone, ["eu", "site"]),
        ]:
            created = _create(web, token, name, url, locations)
            assert created.status_code == 201, created.text
            assert created.json()["locations"] == locations
        assert not Scan.dangerously_unscoped.exists()

        site_log, eu_log = tmp_path / "site.log", tmp_path / "eu.log"
        stack.callback(stop, start_worker("-Q", "celery,scans.site", "-n", "site@box-1",
                                          env=env, log=site_log))
        stack.callback(stop, start_worker("-Q", "scans.eu", "-n", "eu@box-2", env=env, log=eu_log))
        for _ in range(2):  # two beats at once, as a doubled beat would
            app.send_task("scans.tasks.enqueue_due_scans")

        def settled() -> bool:
            scans = Scan.dangerously_unscoped.all()
            # The beat's pass sends one waiting scan per origin; play it while they wait.
            for scan_id in scanning.redispatch_due():
                scanning.send(scan_id)
            return scans.count() == 6 and all(
                s.status in {ScanStatus.SUCCEEDED, ScanStatus.ERRORED} for s in scans)

        wait_for(settled, 240, "the six scans to finish", every=1.0)
        answered_shared = _requests_answered(host_a, port_a)
        answered_alone = _requests_answered(host_b, port_b)

        expected = {("both places", "site"), ("both places", "eu"), ("from eu", "eu"),
                    ("default place", "site"), ("other origin", "eu"), ("other origin", "site")}
        scans = list(Scan.dangerously_unscoped.select_related("endpoint"))
        assert {(s.endpoint.name, s.location) for s in scans} == expected  # one per location
        for scan in scans:
            assert scan.status == ScanStatus.SUCCEEDED, scan.error_reason
        # Exactly once: each scan's preflight probe and two requests, nothing more.
        assert answered_shared == 4 * 3 and answered_alone == 2 * 3
        # Each worker ran exactly its own location's scans.
        assert _succeeded_runs(site_log) == 3 and _succeeded_runs(eu_log) == 3
        # One origin, one scan at a time, across both workers.
        on_shared = sorted((s.started_at, s.finished_at) for s in scans if s.endpoint.base_url == shared)
        for (_, finished), (started, _) in itertools.pairwise(on_shared):
            assert finished <= started
        assert not OriginLock.objects.exists()

        # An eu scan delivered to the site's queue is not run there; its own queue runs it.
        endpoint = Endpoint.dangerously_unscoped.get(name="from eu")
        stray = Scan.dangerously_unscoped.create(endpoint=endpoint, trigger="api", location="eu",
                                                 origin=scanning.origin_of(shared))
        run_scan.apply_async((stray.pk,), queue="scans.site")
        wait_for(lambda: "belongs to location 'eu'" in site_log.read_text(), 60,
                 "the site worker to refuse the eu scan")
        stray.refresh_from_db()
        assert stray.status == ScanStatus.QUEUED and stray.started_at is None
        scanning.send(stray.pk)
        wait_for(lambda: Scan.dangerously_unscoped.get(pk=stray.pk).status == ScanStatus.SUCCEEDED,
                 60, "the eu worker to run it")
        assert _succeeded_runs(eu_log) == 4 and _succeeded_runs(site_log) == 3
