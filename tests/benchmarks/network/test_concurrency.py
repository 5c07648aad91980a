"""Against real PostgreSQL: many lease calls at once never hand one job to two hosts, a pass
skips rows another transaction holds instead of waiting, and concurrent folds fold once."""

from __future__ import annotations

import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.core.cache import cache
from django.db import connection, transaction
from rest_framework.test import APIClient

from benchmarks import tasks
from benchmarks.models import Host, Job, JobStatus
from benchmarks.network import ewma, routing
from tests.conftest import bearer
from tests.helpers.network import build_net, make_catalog
from tests.helpers.processes import wait_for

# Jobs queue before the hosts that race for them exist.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("queue_without_hosts")]


def _in_thread(fn):
    """Run fn on its own database connection (Django connections are per thread)."""
    def wrapped(*args):
        try:
            return fn(*args)
        finally:
            connection.close()
    return wrapped


@pytest.mark.parametrize("started", [False, True], ids=["lease", "lease-and-start"])
def test_many_concurrent_lease_calls_never_hand_one_job_to_two_hosts(started):
    make_catalog()
    net = build_net()
    tokens = [net.host(f"h{i:02d}", slots=3)[1] for i in range(20)]
    Host.dangerously_unscoped.update(suspended=True)
    job_ids = {net.submit_id() for _ in range(45)}
    Host.dangerously_unscoped.update(suspended=False)
    start = threading.Barrier(40)
    seen: list[str] = []  # every delivery, from every thread (list.append is atomic)

    @_in_thread
    def lease_like_an_agent(token):
        """Ask again and again, as agents do, until all 45 jobs are out (or 30 s pass)."""
        client = APIClient()
        start.wait()
        got = []
        deadline = time.monotonic() + 30
        while len(seen) < 45 and time.monotonic() < deadline:
            response = client.post("/v1/hosts/lease", {"start": started}, format="json",
                                   **bearer(token))
            if response.status_code == 204:
                time.sleep(0.01)
                continue
            assert response.status_code == 200, response.content
            got.append(response.json()["id"])
            seen.append(got[-1])
        return token, got

    with ThreadPoolExecutor(max_workers=40) as pool:
        results = list(pool.map(lease_like_an_agent, tokens * 2))

    delivered = Counter(job_id for _, got in results for job_id in got)
    assert set(delivered) == job_ids  # every job went out (45 jobs, 60 slots)
    assert max(delivered.values()) == 1  # and each exactly once
    for token, got in results:
        host = Host.dangerously_unscoped.get(token_prefix=token[:12])
        assert all(Job.dangerously_unscoped.get(pk=j).host_id == host.pk for j in got)
    held = Job.dangerously_unscoped.filter(
        status=JobStatus.RUNNING if started else JobStatus.LEASED)
    assert held.count() == 45
    per_host = Counter(held.values_list("host", flat=True))
    assert max(per_host.values()) <= 3


def test_submissions_and_leases_racing_keep_every_job_on_one_host_within_its_slots():
    make_catalog()
    net = build_net()
    tokens = [net.host(f"h{i:02d}", slots=2)[1] for i in range(10)]
    start = threading.Barrier(30)

    @_in_thread
    def submit(_):
        client = APIClient()
        start.wait()
        for _ in range(5):
            body = {"model": "tiny-q4", "max_tokens": 8, "messages": [{"role": "user", "content": "x"}]}
            assert client.post("/v1/jobs", body, format="json", **bearer(net.buyer_token)).status_code == 202

    @_in_thread
    def lease_and_finish(token):
        client = APIClient()
        start.wait()
        done = 0
        for _ in range(30):
            response = client.post("/v1/hosts/lease", format="json", **bearer(token))
            if response.status_code == 200:
                job_id = response.json()["id"]
                finished = client.post(f"/v1/jobs/{job_id}/complete", {
                    "ttft_ms": 5, "completion_tokens": 1, "elapsed_ms": 10}, format="json",
                    **bearer(token))
                assert finished.status_code == 200, finished.content
                done += 1
        return done

    with ThreadPoolExecutor(max_workers=30) as pool:
        submitters = [pool.submit(submit, i) for i in range(10)]
        leasers = [pool.submit(lease_and_finish, token) for token in tokens * 2]
        for future in submitters:
            future.result()
        finished = sum(future.result() for future in leasers)
    assert Job.dangerously_unscoped.count() == 50
    completed = Job.dangerously_unscoped.filter(status=JobStatus.COMPLETED)
    assert completed.count() == finished
    assert all(len(job.tried_hosts) == 1 for job in completed)


def test_a_pass_skips_a_queued_row_another_transaction_holds_instead_of_waiting():
    make_catalog()
    net = build_net()
    net.host("h1", slots=2)
    Host.dangerously_unscoped.update(suspended=True)
    held, free = net.submit_id(), net.submit_id()
    Host.dangerously_unscoped.update(suspended=False)
    locked, release = threading.Event(), threading.Event()

    @_in_thread
    def hold_first_job():
        with transaction.atomic():
            Job.dangerously_unscoped.select_for_update().get(pk=held)
            locked.set()
            release.wait(timeout=30)

    holder = threading.Thread(target=hold_first_job)
    holder.start()
    try:
        assert locked.wait(timeout=10)
        assert routing.assignment_pass() == 1  # returns instead of blocking on the held row
        assert net.job(free).status == JobStatus.LEASED
        assert net.job(held).status == JobStatus.QUEUED
    finally:
        release.set()
        holder.join()
    assert routing.assignment_pass() == 1
    assert net.job(held).status == JobStatus.LEASED


def test_concurrent_folds_and_duplicate_completions_fold_each_job_once():
    make_catalog()
    net = build_net()
    host, token = net.host("h1")
    runs = [(100.0, 20, 1000.0), (200.0, 100, 2000.0), (400.0, 10, 1000.0)]
    for ttft, tokens, elapsed in runs:
        net.submit_id(max_tokens=128)
        job_id = net.run(token, ttft_ms=ttft, completion_tokens=tokens, elapsed_ms=elapsed)
        # on_commit ran the fold already (transactional test); deliver it again, concurrently
        start = threading.Barrier(8)

        @_in_thread
        def again(i, start=start, job_id=job_id, ttft=ttft, tokens=tokens, elapsed=elapsed):
            start.wait()
            if i % 2:
                return ewma.fold_host(host.pk)
            client = APIClient()
            return client.post(f"/v1/jobs/{job_id}/complete", {
                "ttft_ms": ttft, "completion_tokens": tokens, "elapsed_ms": elapsed},
                format="json", **bearer(token)).status_code

        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(again, range(8)))
    host.refresh_from_db()
    assert host.ttft_ewma_ms == pytest.approx(0.3 * 400 + 0.7 * (0.3 * 200 + 0.7 * 100))
    assert host.tps_ewma == pytest.approx(0.3 * 10 + 0.7 * (0.3 * 50 + 0.7 * 20))
    assert not Job.dangerously_unscoped.filter(folded_at__isnull=True).exists()


def _waiting_on_a_lock() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                       "AND wait_event_type = 'Lock'")
        return cursor.fetchone()[0]


RUNS = [(100.0, 20, 1000.0), (200.0, 100, 2000.0)]  # TTFT 100 → 130, TPS 20 → 29


@pytest.mark.redis
def test_a_completion_during_a_fold_waits_for_it_and_is_folded_by_the_next(messages_on_the_broker):
    make_catalog()
    net = build_net()
    host, token = net.host("h1", slots=2)
    first, second = net.submit_id(max_tokens=128), net.submit_id(max_tokens=128)
    routing.assignment_pass()
    for _ in range(2):
        assert net.lease(token).status_code == 200
    for job_id in (first, second):
        assert net.start(token, job_id).status_code == 200
    (ttft, tokens, elapsed), later = RUNS
    assert net.complete(token, first, ttft_ms=ttft, completion_tokens=tokens,
                        elapsed_ms=elapsed).status_code == 200
    folding, release = threading.Event(), threading.Event()

    @_in_thread
    def fold():  # a fold task that has read and blended, and not yet committed
        with transaction.atomic():
            folded = tasks.fold_host_ewmas()
            folding.set()
            assert release.wait(timeout=30)
        return folded

    @_in_thread
    def complete_second():
        return APIClient().post(f"/v1/jobs/{second}/complete", {
            "ttft_ms": later[0], "completion_tokens": later[1], "elapsed_ms": later[2]},
            format="json", **bearer(token)).status_code

    with ThreadPoolExecutor(max_workers=2) as pool:
        folded = pool.submit(fold)
        assert folding.wait(timeout=30)
        completed = pool.submit(complete_second)
        wait_for(lambda: _waiting_on_a_lock() == 1, 30, "the completion to wait for the host")
        release.set()
        assert folded.result() == 1 and completed.result() == 200
    # The completion settled after the fold's commit, so the fold did not see it; the fold had
    # cleared the pending mark, so the completion queued the next fold.
    assert net.job(second).folded_at is None
    assert cache.get(tasks.FOLD_PENDING_KEY)
    assert tasks.fold_host_ewmas() == 1
    host.refresh_from_db()
    assert host.ttft_ewma_ms == pytest.approx(0.3 * 200 + 0.7 * 100)
    assert host.tps_ewma == pytest.approx(0.3 * 50 + 0.7 * 20)
    assert not Job.dangerously_unscoped.filter(folded_at__isnull=True).exists()


@pytest.mark.redis
def test_a_fold_folds_the_other_hosts_first_and_then_waits_for_a_held_one(messages_on_the_broker):
    fleet = []
    make_catalog()
    net = build_net()
    for name in ("held", "free"):
        model = f"{name}-q4"
        make_catalog(model)
        host, token = net.host(name, models=(model,))
        net.submit_id(model=model, max_tokens=128)
        routing.assignment_pass()
        net.run(token, ttft_ms=100.0, completion_tokens=20, elapsed_ms=1000.0)
        fleet.append(host)
    held, free = fleet
    holding, release = threading.Event(), threading.Event()

    @_in_thread
    def hold():  # a transaction holding the host row, as a completion in flight does
        with transaction.atomic():
            Host.dangerously_unscoped.select_for_update().filter(pk=held.pk).values_list("pk").get()
            holding.set()
            assert release.wait(timeout=30)

    with ThreadPoolExecutor(max_workers=2) as pool:
        holder = pool.submit(hold)
        assert holding.wait(timeout=30)
        folded = pool.submit(_in_thread(ewma.fold_pending))
        # The free host is folded (and committed) while the held one is still held.
        wait_for(lambda: not Job.dangerously_unscoped.filter(
            host=free, folded_at__isnull=True).exists(), 30, "the free host's fold")
        assert Job.dangerously_unscoped.filter(host=held, folded_at__isnull=True).exists()
        release.set()
        holder.result()
        assert folded.result() == (2, True)
    for host in fleet:
        host.refresh_from_db()
        assert (host.ttft_ewma_ms, host.tps_ewma) == (100.0, 20.0)
