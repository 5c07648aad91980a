"""Hosts wait for work: a lease with `wait_s` is held until a pass assigns the host a
job, woken through Redis (benchmarks/network/wakeup.py) or, without Redis, by polling; only a pass that
assigned work announces it; one pass assigns many jobs, and a worker's pass waits for the one
in flight instead of leaving jobs to the tick. Real PostgreSQL and Redis, real threads."""

from __future__ import annotations

import threading

import pytest
import redis
from django.db import connection, transaction
from rest_framework.test import APIClient

from benchmarks import tasks
from benchmarks.models import Host, Job, JobStatus
from benchmarks.network import routing, wakeup
from tests.conftest import bearer
from tests.helpers.network import build_net, make_catalog
from tests.helpers.processes import wait_for
from tokvera_site.devservices import EmbeddedRedis

# Some jobs queue while their hosts are suspended.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("queue_without_hosts")]


class WaitingLease(threading.Thread):
    """POST /v1/hosts/lease with wait_s, on its own thread and database connection."""

    def __init__(self, token: str, wait_s: float, path: str = "/v1/hosts/lease", body=None):
        super().__init__(daemon=True)
        self.token, self.path = token, path
        self.body = {"start": True, "wait_s": wait_s} if body is None else body
        self.answer = None

    def run(self) -> None:
        try:
            self.answer = APIClient().post(self.path, self.body, format="json", **bearer(self.token))
        finally:
            connection.close()

    def result(self):
        self.join(timeout=60)
        assert not self.is_alive(), "the waiting call never answered"
        return self.answer


def _listening(host_id: int) -> bool:
    """This process's subscription is up and holds a waiting call of the host."""
    listener = wakeup._listener()
    return bool(listener and listener.connected.is_set() and host_id in listener._waiting)


@pytest.fixture
def net():
    make_catalog()
    return build_net()


def test_a_waiting_lease_gets_the_job_a_pass_assigns_while_it_waits(net, monkeypatch):
    # No polling to fall back on: only the pass's announcement can end this wait early.
    monkeypatch.setattr(wakeup, "POLL_S", 120.0)
    host, token = net.host("idle")
    waiting = WaitingLease(token, wait_s=30)
    waiting.start()
    wait_for(lambda: _listening(host.pk), 10, "the lease to wait")
    job_id = net.submit_id()  # eager Celery: the pass runs now and announces after its commit
    answer = waiting.result()
    assert answer.status_code == 200, answer.content
    assert answer.json()["id"] == job_id and answer.json()["status"] == "running"
    assert net.job(job_id).host == host


def test_a_completion_asking_for_the_next_job_waits_for_it_too(net, monkeypatch):
    monkeypatch.setattr(wakeup, "POLL_S", 120.0)
    host, token = net.host("busy")
    first = net.submit_id()
    assert net.lease(token).json()["id"] == first
    done = {"ttft_ms": 50.0, "completion_tokens": 4, "elapsed_ms": 90.0, "lease_next": True, "wait_s": 30}
    waiting = WaitingLease(token, 30, path=f"/v1/jobs/{first}/complete", body=done)
    waiting.start()
    wait_for(lambda: _listening(host.pk), 10, "the completion to wait")
    assert net.job(first).status == JobStatus.COMPLETED  # recorded before the wait
    second = net.submit_id()
    answer = waiting.result()
    assert answer.status_code == 200 and answer.json()["status"] == "completed"
    assert answer.json()["next"]["id"] == second and answer.json()["next"]["status"] == "running"


def test_a_waiting_lease_with_nothing_assigned_answers_204_when_its_wait_ends(net):
    _, token = net.host("idle")
    answer = APIClient().post("/v1/hosts/lease", {"wait_s": 0.3}, format="json", **bearer(token))
    assert answer.status_code == 204
    too_long = APIClient().post("/v1/hosts/lease", {"wait_s": 31}, format="json", **bearer(token))
    assert too_long.status_code == 400 and "wait_s" in too_long.json()


def test_without_redis_a_waiting_host_still_gets_its_job_by_polling(net, settings):
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    host, token = net.host("idle")
    waiting = WaitingLease(token, wait_s=20)
    waiting.start()
    job_id = net.submit_id()
    answer = waiting.result()
    assert answer.status_code == 200 and answer.json()["id"] == job_id


@pytest.fixture
def own_redis_cache(settings):
    """The cache on a Redis server of this test's own: processes sharing the test Redis
    database (parallel test workers) share its wake-up channel, and a pass in another one would
    be heard here."""
    with EmbeddedRedis() as own:
        settings.CACHES = {"default": {**settings.CACHES["default"], "LOCATION": own.url(0)}}
        yield own.url(0)


def test_only_a_pass_that_assigned_work_announces_it_never_a_heartbeat(net, own_redis_cache):
    url = own_redis_cache
    client = redis.Redis.from_url(url)
    subscription = client.pubsub(ignore_subscribe_messages=True)
    subscription.subscribe(wakeup.channel(url))
    wait_for(lambda: client.pubsub_numsub(wakeup.channel(url))[0][1] >= 1, 10, "the subscription")
    try:
        host, token = net.host("h1", slots=2)
        for _ in range(3):
            assert net.heartbeat(token, ["tiny-q4"], slots=2).status_code == 200
        assert routing.assignment_pass() == 0  # nothing queued: nothing to say
        assert subscription.get_message(timeout=0.5) is None
        net.submit_id()
        message = subscription.get_message(timeout=5)
        assert message is not None and message["data"] == str(host.pk).encode()
    finally:
        subscription.close()
        client.close()


def test_one_pass_assigns_many_queued_jobs_to_many_hosts_in_score_order(net):
    fleet = {
        name: net.host(name, slots=2, reputation=rep)[0]
        for name, rep in (("good", 0.9), ("fair", 0.7), ("poor", 0.2))
    }
    Host.dangerously_unscoped.update(suspended=True)  # let the jobs queue up first
    ids = [net.submit_id() for _ in range(7)]
    Host.dangerously_unscoped.update(suspended=False)
    assert tasks.assign_queued_jobs.apply().result == 6  # every free slot, in one task
    per_host = {name: Job.dangerously_unscoped.filter(host=host).count() for name, host in fleet.items()}
    assert per_host == {"good": 2, "fair": 2, "poor": 2}
    assert [net.job(i).status for i in ids].count(JobStatus.QUEUED) == 1
    assert net.job(ids[-1]).status == JobStatus.QUEUED  # first in, first out


def test_a_workers_pass_waits_for_the_pass_in_flight_then_takes_what_it_left(net):
    net.host("h1", slots=2)
    Host.dangerously_unscoped.update(suspended=True)
    job_id = net.submit_id()
    Host.dangerously_unscoped.update(suspended=False)
    locked, release = threading.Event(), threading.Event()

    def pass_in_flight():
        try:
            with transaction.atomic():
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_advisory_xact_lock(%s)", [routing._PASS_LOCK_KEY])
                locked.set()
                release.wait(timeout=30)
        finally:
            connection.close()

    holder = threading.Thread(target=pass_in_flight)
    holder.start()
    try:
        assert locked.wait(timeout=10)
        assert routing.assignment_pass() == 0  # a request's pass never waits
        worker_pass = []
        waiter = threading.Thread(
            target=lambda: (worker_pass.append(routing.assign_queued()), connection.close())
        )
        waiter.start()
        assert net.job(job_id).status == JobStatus.QUEUED
        release.set()
        waiter.join(timeout=30)
        assert worker_pass == [1]
        assert net.job(job_id).status == JobStatus.LEASED
    finally:
        release.set()
        holder.join()


def test_waiting_calls_beyond_the_process_limit_answer_at_once(net, settings, monkeypatch):
    monkeypatch.setattr(wakeup, "POLL_S", 120.0)
    settings.NETWORK_WAITING_LEASES_PER_PROCESS = 1
    first, first_token = net.host("first")
    _, second_token = net.host("second")
    waiting = WaitingLease(first_token, wait_s=30)
    waiting.start()
    wait_for(lambda: _listening(first.pk), 10, "the first lease to wait")
    over = APIClient().post("/v1/hosts/lease", {"wait_s": 30}, format="json", **bearer(second_token))
    assert over.status_code == 204 and waiting.is_alive()  # answered while the first still waits
    net.submit_id()
    assert waiting.result().status_code == 200
