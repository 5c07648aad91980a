"""Leases and deadlines: expiry returns a job to the queue for a different host, attempts are
limited, and a job nobody can take fails with `no_host` after the queue deadline."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.db import IntegrityError, transaction

from benchmarks import tasks
from benchmarks.models import Job, JobStatus
from benchmarks.network import ewma, hosts, jobs
from tests.helpers.network import T0

# These tests are about the queue: jobs wait for hosts the test brings later.
pytestmark = pytest.mark.usefixtures("queue_without_hosts")


def test_a_lease_not_started_in_30_seconds_goes_to_a_different_host(net):
    with time_machine.travel(T0, tick=False) as clock:
        first, first_token = net.host("first", reputation=0.9)
        second, second_token = net.host("second", reputation=0.2)
        job_id = net.submit_id()
        assert net.job(job_id).host == first
        clock.move_to(T0 + timedelta(seconds=30))
        jobs.housekeeping()
        assert net.job(job_id).status == JobStatus.LEASED  # not yet: "after" 30 s
        clock.move_to(T0 + timedelta(seconds=31))
        net.heartbeat(first_token, ["tiny-q4"])  # still online, still the better host
        net.heartbeat(second_token, ["tiny-q4"])
        assert net.lease(second_token).json()["id"] == job_id  # a lease call expires leases
        job = net.job(job_id)
        assert job.host == second and job.attempts == 2 and job.tried_hosts == [first.pk, second.pk]


def test_a_start_after_the_lease_deadline_is_refused_even_before_the_sweep(net):
    with time_machine.travel(T0, tick=False) as clock:
        _, token = net.host("first")
        job_id = net.submit_id()
        net.lease(token)
        clock.move_to(T0 + timedelta(seconds=31))  # no housekeeping has run yet
        response = net.start(token, job_id)
        assert response.status_code == 409
        assert "lease expired" in response.json()["detail"]
        assert net.job(job_id).status == JobStatus.LEASED  # the sweep will requeue it


def test_a_running_job_past_its_run_deadline_goes_back_to_the_queue(net):
    with time_machine.travel(T0, tick=False) as clock:
        _, token = net.host("first")
        job_id = net.submit_id()
        net.lease(token)
        net.start(token, job_id)
        clock.move_to(T0 + timedelta(seconds=299))
        jobs.housekeeping()
        assert net.job(job_id).status == JobStatus.RUNNING
        clock.move_to(T0 + timedelta(seconds=301))
        jobs.housekeeping()
        job = net.job(job_id)
        assert job.status == JobStatus.QUEUED and job.host is None and job.started_at is None
        assert net.complete(token, job_id).status_code == 404


def test_an_expiry_lowers_the_hosts_reputation(net):
    with time_machine.travel(T0, tick=False) as clock:
        host, _ = net.host("flaky", reputation=0.8)
        net.submit_id()
        clock.move_to(T0 + timedelta(seconds=31))
        jobs.housekeeping()
    host.refresh_from_db()
    assert host.reputation == pytest.approx(0.9 * 0.8)


def test_after_three_hosts_let_it_expire_the_job_fails(net):
    with time_machine.travel(T0, tick=False) as clock:
        for name in ("a", "b", "c", "d"):
            net.host(name, slots=1)
        job_id = net.submit_id()
        held_by = []
        for step in range(1, 4):
            held_by.append(net.job(job_id).host.name)
            clock.move_to(T0 + timedelta(seconds=31 * step))
            for name in ("a", "b", "c", "d"):
                net.heartbeat(net.tokens[name], ["tiny-q4"])
            tasks.network_tick.delay()
        job = net.job(job_id)
    assert len(set(held_by)) == 3
    assert job.status == JobStatus.FAILED and job.failure_reason == "attempts_exhausted"
    assert job.attempts == 3 and job.settled_at == T0 + timedelta(seconds=93)


def test_a_job_nobody_can_take_fails_with_no_host_after_the_queue_deadline(net):
    with time_machine.travel(T0, tick=False) as clock:
        job_id = net.submit_id()
        clock.move_to(T0 + timedelta(seconds=120))
        tasks.network_tick.delay()
        assert net.job(job_id).status == JobStatus.QUEUED
        clock.move_to(T0 + timedelta(seconds=121))
        tasks.network_tick.delay()
        job = net.job(job_id)
    assert job.status == JobStatus.FAILED and job.failure_reason == "no_host"
    assert job.settled_at == T0 + timedelta(seconds=121) and job.host is None


def test_a_job_only_its_previous_host_serves_waits_for_another_and_then_fails(net):
    with time_machine.travel(T0, tick=False) as clock:
        _, token = net.host("lonely")
        job_id = net.submit_id()
        clock.move_to(T0 + timedelta(seconds=31))
        net.heartbeat(token, ["tiny-q4"])
        assert net.lease(token).status_code == 204
        assert net.job(job_id).status == JobStatus.QUEUED
        clock.move_to(T0 + timedelta(seconds=31 + 121))
        net.heartbeat(token, ["tiny-q4"])
        assert net.lease(token).status_code == 204
        assert net.job(job_id).failure_reason == "no_host"


def test_suspending_a_host_requeues_its_unstarted_jobs_without_using_an_attempt(net):
    host, token = net.host("h1", slots=2)
    waiting = net.submit_id()
    running = net.submit_id()
    net.lease(token)
    net.lease(token)
    net.start(token, running)
    hosts.set_suspended(host, True, actor="test")
    assert net.job(waiting).status == JobStatus.QUEUED and net.job(waiting).attempts == 0
    assert net.job(running).status == JobStatus.RUNNING
    assert net.lease(token).status_code == 204
    assert net.complete(token, running).status_code == 200


def test_a_failed_job_lowers_reputation_but_gives_no_speed_sample(net, django_capture_on_commit_callbacks):
    host, token = net.host("h1", reputation=0.5)
    job_id = net.submit_id()
    net.lease(token)
    with django_capture_on_commit_callbacks(execute=True):
        net.fail(token, job_id)
    host.refresh_from_db()
    assert host.reputation == pytest.approx(0.45)
    assert host.ttft_ewma_ms is None and host.tps_ewma is None
    assert ewma.fold_host(host.pk) == 0


def test_only_completed_and_failed_jobs_carry_a_settled_at(net):
    job_id = net.submit_id()
    with pytest.raises(IntegrityError), transaction.atomic():
        Job.dangerously_unscoped.filter(pk=job_id).update(settled_at=T0)
    with pytest.raises(IntegrityError), transaction.atomic():
        Job.dangerously_unscoped.filter(pk=job_id).update(status=JobStatus.COMPLETED)
