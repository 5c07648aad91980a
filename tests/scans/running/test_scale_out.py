"""Several machines on one box: two web processes (gunicorn) and two workers serving different
scan locations under different host names (-n), one PostgreSQL and one Redis. Endpoints are
created through both web processes with their locations; two beats fire at once. Every scan
runs exactly once, in its own location's queue; scans of one origin never overlap, whichever
worker runs them; a scan sent to another location's queue is not run there.

The network side of the same picture: jobs submitted, leased, completed and failed through both
web processes while two workers, both consuming the fold tasks' queue, fold the hosts' EWMAs and
race each other's sweeps; every settled job is folded exactly once."""

from __future__ import annotations

import itertools
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from accounts.models import TokenScope
from accounts.teams import issue_token
from benchmarks.models import Host, Job, JobStatus
from benchmarks.network import catalog, ewma, hosts
from scans import origins
from scans.grader.demo_server import TargetConfig, running_target
from scans.models import Endpoint, OriginLock, Scan, ScanStatus
from scans.running import dispatch
from scans.tasks import run_scan
from tests.helpers import workers
from tests.helpers.processes import gunicorn, wait_for
from tests.helpers.workers import stop, worker_env
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
        web_1, web_2 = stack.enter_context(gunicorn(env)), stack.enter_context(gunicorn(env))

        refused = _create(web_1, token, "nowhere", alone, ["mars"])
        assert refused.status_code == 422  # schema-valid, names a location the site lacks
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
        stack.callback(stop, workers.start("-Q", "celery,scans.site", "-n", "site@box-1",
                                          env=env, log=site_log))
        stack.callback(stop, workers.start("-Q", "scans.eu", "-n", "eu@box-2", env=env, log=eu_log))
        for _ in range(2):  # two beats at once, as a doubled beat would
            app.send_task("scans.tasks.enqueue_due_scans")

        def settled() -> bool:
            scans = Scan.dangerously_unscoped.all()
            # The beat's pass sends one waiting scan per origin; play it while they wait.
            for scan_id in dispatch.redispatch_due():
                dispatch.send(scan_id)
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
                                                 origin=origins.origin_of(shared))
        run_scan.apply_async((stray.pk,), queue="scans.site")
        wait_for(lambda: "belongs to location 'eu'" in site_log.read_text(), 60,
                 "the site worker to refuse the eu scan")
        stray.refresh_from_db()
        assert stray.status == ScanStatus.QUEUED and stray.started_at is None
        dispatch.send(stray.pk)
        wait_for(lambda: Scan.dangerously_unscoped.get(pk=stray.pk).status == ScanStatus.SUCCEEDED,
                 60, "the eu worker to run it")
        # Celery logs "succeeded" after the task returns, so after the row says so: wait for it.
        wait_for(lambda: _succeeded_runs(eu_log) == 4, 30, "the eu worker's log of the run")
        assert _succeeded_runs(site_log) == 3


# --- folds: two webs, two workers on the fold tasks' queue, every settled job folded once ------

FOLD_MODEL = "fold-q4"
FOLD_HOSTS = 4
FOLD_JOBS = 40  # under the team's submission rate and unsettled cap (benchmarks/policy.py)
FOLD_ROUNDS = 5  # rounds of submissions, sweeps and fold tasks sent while jobs flow
# The fold task and the sweep go to the default queue (no task routes): both workers read it,
# plus a queue of their own, so that each surely runs sweeps and folds during the race.
FOLD_WORKERS = {"box-1": "direct.box-1", "box-2": "direct.box-2"}


def _purge(*queues: str) -> None:
    with app.connection_for_write() as conn:
        for queue in queues:
            conn.default_channel.queue_purge(queue)


def _count(log_path, task: str) -> int:
    return len(re.findall(rf"{re.escape(task)}\[[^\]]+\] succeeded in ", log_path.read_text()))


class _Network:
    """HTTP calls of buyers and hosts, each call through the next of the web processes."""

    def __init__(self, webs: list[str]):
        self.webs = webs
        self.turns = itertools.cycle(webs)
        self.figures = itertools.count()  # a different ttft_ms / elapsed_ms for every settlement
        self.settled = 0
        self.lock = threading.Lock()
        self.stopped = threading.Event()

    def post(self, client: httpx.Client, path: str, token: str, body: dict) -> httpx.Response:
        with self.lock:
            web = next(self.turns)
        return client.post(f"{web}{path}", json=body, headers={"Authorization": f"Bearer {token}"})

    def heartbeat(self, client: httpx.Client, token: str) -> None:
        answer = self.post(client, "/v1/hosts/heartbeat", token, {"models": [FOLD_MODEL], "slots": 1})
        assert answer.status_code == 200, answer.text
        assert answer.json()["online"]

    def submit(self, client: httpx.Client, token: str, n: int) -> None:
        answer = self.post(client, "/v1/jobs", token, {
            "model": FOLD_MODEL, "max_tokens": 64,
            "messages": [{"role": "user", "content": f"job {n}"}]})
        assert answer.status_code == 202, answer.text

    def settle(self, client: httpx.Client, token: str, job_id: str) -> dict | None:
        """Fail the job (one settlement in six) or complete it with figures of its own and
        lease_next; the next job, already running, or None."""
        n = next(self.figures)
        if n % 6 == 5:
            answer = self.post(client, f"/v1/jobs/{job_id}/fail", token, {"reason": f"no memory ({n})"})
        else:
            answer = self.post(client, f"/v1/jobs/{job_id}/complete", token, {
                "ttft_ms": 40 + 3.7 * n, "completion_tokens": 8 + n % 17,
                "elapsed_ms": 300 + 41.3 * n, "result": {"content": "ok"}, "lease_next": True})
        assert answer.status_code == 200, answer.text
        assert answer.json()["status"] in {"completed", "failed"}
        with self.lock:
            self.settled += 1
        return answer.json().get("next")

    def serve(self, token: str) -> int:
        """One host until every job is settled: lease (started), settle, heartbeat every few
        seconds. Returns how many jobs it settled."""
        try:
            done, job, beat_at, deadline = 0, None, time.monotonic(), time.monotonic() + 90
            with httpx.Client(timeout=30, trust_env=False) as client:
                while self.settled < FOLD_JOBS and not self.stopped.is_set():
                    assert time.monotonic() < deadline, "jobs still unsettled after 90 s"
                    if time.monotonic() - beat_at > 5:
                        self.heartbeat(client, token)
                        beat_at = time.monotonic()
                    if job is not None:
                        job, done = self.settle(client, token, job["id"]), done + 1
                        continue
                    leased = self.post(client, "/v1/hosts/lease", token, {"start": True})
                    if leased.status_code == 204:
                        time.sleep(0.1)
                        continue
                    assert leased.status_code == 200, leased.text
                    job = leased.json()
                    assert job["status"] == "running"
            return done
        except BaseException:
            self.stopped.set()
            raise


def _folded_once(host: Host) -> Host:
    """The host's EWMAs and reputation recomputed from its settled jobs, one at a time in
    settlement order, on a fresh host: what folding each job exactly once gives."""
    fresh = Host()
    settled = Job.dangerously_unscoped.filter(host=host, settled_at__isnull=False)
    for job in settled.order_by("settled_at", "id"):
        if job.status == JobStatus.COMPLETED:
            ewma.apply_completed(fresh, job)
        else:
            ewma.apply_failure(fresh)
    return fresh


def test_two_webs_and_two_workers_fold_every_settled_job_exactly_once(world, tmp_path):
    _, buyer = issue_token(world.team, TokenScope.READ_WRITE)
    catalog.add_catalog_model(FOLD_MODEL, "Q4_K_M", 4096)
    fleet = [hosts.create_host(world.other_team, f"fold-{i}", "software") for i in range(FOLD_HOSTS)]
    # The test counts the workers' "succeeded" lines for the sweeps it sends, which periodic
    # tasks log only at INFO (TOKVERA_PERIODIC_LOG_LEVEL keeps them quiet by default).
    env = worker_env(DEBUG="0", ALLOWED_HOSTS="127.0.0.1", TOKVERA_PERIODIC_LOG_LEVEL="INFO")
    _purge(*FOLD_WORKERS.values())
    with ExitStack() as stack:
        stack.callback(_purge, *FOLD_WORKERS.values())
        logs = {name: tmp_path / f"{name}.log" for name in FOLD_WORKERS}
        for name, own in FOLD_WORKERS.items():
            # Both queues of the network's tasks (folds on `celery`, passes on `passes`).
            stack.callback(stop, workers.start("-Q", f"celery,passes,{own}", "-n", f"folds@{name}",
                                              "-c", "4", env=env, log=logs[name]))
        net = _Network([stack.enter_context(gunicorn(env)), stack.enter_context(gunicorn(env))])
        for log in logs.values():
            wait_for(lambda log=log: " ready." in log.read_text(), 60, f"the worker of {log.name}")
        client = stack.enter_context(httpx.Client(timeout=30, trust_env=False))
        for _, token in fleet:
            net.heartbeat(client, token)
        for n in range(FOLD_JOBS // 2):  # one to each of the free hosts, the rest queued
            net.submit(client, buyer, n)

        with ThreadPoolExecutor(FOLD_HOSTS) as pool:
            served = [pool.submit(net.serve, token) for _, token in fleet]
            # While completions flow: the other half of the jobs, and sweeps and duplicate fold
            # tasks on both workers, so folds and sweeps of one host race across the workers.
            per_round = FOLD_JOBS // 2 // FOLD_ROUNDS
            for r in range(FOLD_ROUNDS):
                for n in range(per_round):
                    net.submit(client, buyer, FOLD_JOBS // 2 + r * per_round + n)
                for own in FOLD_WORKERS.values():
                    app.send_task("benchmarks.tasks.sweep_unfolded", queue=own)
                    app.send_task("benchmarks.tasks.fold_host_ewmas",
                                  args=[fleet[r % FOLD_HOSTS][0].pk], queue=own)
                time.sleep(0.3)
            per_host = [future.result() for future in served]
        assert sum(per_host) == FOLD_JOBS and all(per_host), per_host

        jobs = Job.dangerously_unscoped.all()
        wait_for(lambda: not jobs.filter(settled_at__isnull=False, folded_at__isnull=True).exists(),
                 60, "every settled job to be folded")
        # Each worker ran its own sweeps and fold tasks (and the shared queue's, split as it came).
        for log in logs.values():
            wait_for(lambda log=log: _count(log, "benchmarks.tasks.sweep_unfolded") == FOLD_ROUNDS
                     and _count(log, "benchmarks.tasks.fold_host_ewmas") >= FOLD_ROUNDS,
                     60, f"the sweeps and fold tasks sent to {log.name}")
            assert "raised unexpected" not in log.read_text()
        folds = sum(_count(log, "benchmarks.tasks.fold_host_ewmas") for log in logs.values())
        assert folds > len(FOLD_WORKERS) * FOLD_ROUNDS  # completions queued some as well

        assert jobs.count() == FOLD_JOBS
        assert jobs.filter(status=JobStatus.FAILED).count() == FOLD_JOBS // 6
        assert jobs.filter(status=JobStatus.COMPLETED).count() == FOLD_JOBS - FOLD_JOBS // 6
        assert not jobs.filter(folded_at__isnull=True).exists()
        # Folding each job once, in settlement order, is the only way to these exact figures:
        # a job folded twice (or skipped) would move the TTFT or TPS EWMA or the reputation.
        for host, _ in fleet:
            host.refresh_from_db()
            once = _folded_once(host)
            assert host.reputation == pytest.approx(once.reputation, rel=1e-12)
            for stored, expected in [(host.ttft_ewma_ms, once.ttft_ewma_ms),
                                     (host.tps_ewma, once.tps_ewma)]:
                assert stored == (None if expected is None else pytest.approx(expected, rel=1e-12))
