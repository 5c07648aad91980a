"""Routing: one documented score, deterministic tie-breaks, FIFO, push assignment, and nothing
about the buyer in the decision."""

from __future__ import annotations

import dataclasses
import inspect
from datetime import timedelta

import pytest
import time_machine

from benchmarks import tasks
from benchmarks.models import Host, Job, JobStatus
from benchmarks.network import routing
from benchmarks.network.routing import HostFacts
from tests.helpers.network import T0, make_catalog

# These tests are about the queue: jobs wait for hosts the test brings later.
pytestmark = pytest.mark.usefixtures("queue_without_hosts")

FAST = {"reputation": 0.9, "ttft_ewma_ms": 200.0, "tps_ewma": 80.0, "trust_level": "edr",
        "connect_ready": True}
SLOW = {"reputation": 0.9, "ttft_ewma_ms": 800.0, "tps_ewma": 30.0, "trust_level": "software"}


def facts(host_id=1, models=("tiny-q4",), reputation=0.5, ttft=None, tps=None, trust="none",
          connect=False, last=None, idle=None) -> HostFacts:
    return HostFacts(host_id=host_id, models=frozenset(models), reputation=reputation,
                     ttft_ewma_ms=ttft, tps_ewma=tps, trust_level=trust, connect_ready=connect,
                     last_assigned_at=last, idle_s=idle)


def test_the_score_is_the_documented_formula():
    host = facts(reputation=0.9, ttft=200.0, tps=80.0, trust="edr", connect=True, idle=150.0,
                 last=T0)
    expected = (0.35 * 0.9 + 0.25 * (1000 / 1200) + 0.20 * (80 / 130) + 0.10 * 1.0 + 0.05 * 1.0
                + 0.05 * 0.5)
    assert routing.score(host, "tiny-q4") == pytest.approx(expected, abs=1e-12)


def test_a_host_without_ewmas_scores_the_half_way_marks_and_never_assigned_counts_as_idle():
    new = facts(reputation=0.5)
    assert routing.score(new, "tiny-q4") == pytest.approx(0.35 * 0.5 + 0.25 * 0.5 + 0.20 * 0.5 + 0.05)


def test_a_host_that_does_not_serve_the_model_has_no_score():
    assert routing.score(facts(models=("other",)), "tiny-q4") is None
    assert routing.rank([facts(models=("other",))], "tiny-q4") == []


def test_each_input_moves_the_score_the_right_way():
    base = facts(reputation=0.5, ttft=500.0, tps=40.0, trust="software", idle=60.0, last=T0)
    better = [
        dataclasses.replace(base, reputation=0.9),
        dataclasses.replace(base, ttft_ewma_ms=100.0),
        dataclasses.replace(base, tps_ewma=90.0),
        dataclasses.replace(base, trust_level="edr"),
        dataclasses.replace(base, connect_ready=True),
        dataclasses.replace(base, idle_s=200.0),
    ]
    for host in better:
        assert routing.score(host, "tiny-q4") > routing.score(base, "tiny-q4")


def test_scoring_sees_only_host_facts_and_the_model():
    assert list(inspect.signature(routing.score).parameters) == ["host", "model_id"]
    fields = {f.name for f in dataclasses.fields(HostFacts)}
    assert fields == {"host_id", "models", "reputation", "ttft_ewma_ms", "tps_ewma",
                      "trust_level", "connect_ready", "last_assigned_at", "idle_s"}


def test_ties_go_to_the_least_recently_assigned_then_the_lower_host_id():
    same = dict(reputation=0.8, ttft=300.0, tps=50.0, trust="software", idle=300.0)
    older = facts(host_id=7, last=T0 - timedelta(hours=2), **same)
    newer = facts(host_id=3, last=T0 - timedelta(hours=1), **same)
    never_a = facts(host_id=9, **{**same, "idle": None})
    never_b = facts(host_id=4, **{**same, "idle": None})
    ranked = routing.rank([newer, never_a, older, never_b], "tiny-q4")
    assert [h.host_id for h in ranked] == [4, 9, 7, 3]


def test_the_best_scoring_host_gets_the_job_even_if_a_worse_one_asks_first(net):
    _, slow = net.host("slow", **SLOW)
    fast, fast_token = net.host("fast", **FAST)
    job_id = net.submit_id()
    assert net.lease(slow).status_code == 204
    assert net.job(job_id).host == fast
    assert net.lease(fast_token).json()["id"] == job_id


def test_a_worse_host_gets_a_job_only_when_the_better_hosts_have_no_free_slot(net):
    _, slow = net.host("slow", **SLOW)
    _, fast = net.host("fast", slots=2, **FAST)
    first, second, third = (net.submit_id() for _ in range(3))
    assert [net.lease(fast).json()["id"] for _ in range(2)] == [first, second]
    assert net.lease(slow).json()["id"] == third


def test_queued_jobs_are_assigned_first_in_first_out_whoever_submitted_them(net):
    with time_machine.travel(T0, tick=True):
        ids = [net.submit_id(net.buyer_token if i % 2 else net.other_buyer_token) for i in range(6)]
    _, token = net.host("only", slots=1)  # the heartbeat runs a pass
    served = []
    for _ in range(6):
        served.append(net.run(token))
    assert served == ids


@pytest.mark.parametrize("first_buyer", ["buyer", "other"])
def test_two_buyers_with_different_identities_get_the_same_host_order_and_fifo(net, first_buyer):
    tokens = {"buyer": net.buyer_token, "other": net.other_buyer_token}
    identities = {
        "buyer": {"HTTP_USER_AGENT": "ArtificialAnalysis/1.0", "REMOTE_ADDR": "127.0.0.10"},
        "other": {"HTTP_USER_AGENT": "curl/8.5", "REMOTE_ADDR": "127.0.0.20"},
    }
    order = [first_buyer, "other" if first_buyer == "buyer" else "buyer"] * 2
    for name, extra in (("c-new", {}), ("b-slow", SLOW), ("a-fast", FAST),
                        ("d-fast-too", {**FAST, "reputation": 0.85})):
        net.host(name, slots=1, **extra)
    Host.dangerously_unscoped.update(suspended=True)  # let the jobs queue up first
    with time_machine.travel(T0, tick=True):
        ids = [net.submit_id(tokens[who], **identities[who]) for who in order]
    Host.dangerously_unscoped.update(suspended=False)
    assert routing.assignment_pass() == 4
    assigned = [Job.dangerously_unscoped.get(pk=i).host.name for i in ids]
    # The jobs leave the queue in submission order, to hosts in score order, whoever sent them.
    assert assigned == ["a-fast", "d-fast-too", "b-slow", "c-new"]


def test_ineligible_hosts_get_nothing(net):
    make_catalog("other-q4")
    with time_machine.travel(T0, tick=False) as clock:
        stale, _ = net.host("stale", **FAST)
        clock.move_to(T0 + timedelta(seconds=60))
        suspended, _ = net.host("suspended", **FAST)
        Host.dangerously_unscoped.filter(pk=suspended.pk).update(suspended=True)
        net.host("wrong-model", models=["other-q4"], **FAST)
        job_id = net.submit_id()
        assert net.job(job_id).status == JobStatus.QUEUED
        eligible, _ = net.host("plain")
        routing.assignment_pass()
        assert net.job(job_id).host == eligible


def test_a_job_nobody_serves_does_not_hold_up_later_jobs(net):
    make_catalog("rare-q4")
    with time_machine.travel(T0, tick=True):
        stuck = net.submit_id(model="rare-q4")
        served = net.submit_id()
    net.host("h1")
    routing.assignment_pass()
    assert net.job(stuck).status == JobStatus.QUEUED
    assert net.job(served).status == JobStatus.LEASED


def test_a_heartbeat_only_records_and_the_hosts_next_lease_gets_the_waiting_job(net):
    job_id = net.submit_id()
    assert net.job(job_id).status == JobStatus.QUEUED
    host, token = net.host("late")
    assert net.job(job_id).status == JobStatus.QUEUED  # no assignment pass inside a heartbeat
    assert net.lease(token).json()["id"] == job_id
    assert net.job(job_id).host == host


def test_the_periodic_tick_assigns_jobs_too(net):
    _, token = net.host("h1")
    Host.dangerously_unscoped.update(suspended=True)
    job_id = net.submit_id()
    Host.dangerously_unscoped.update(suspended=False)
    assert tasks.network_tick.delay().get() == 1
    assert net.job(job_id).status == JobStatus.LEASED


def test_assignment_spreads_over_equal_hosts_by_least_recently_assigned(net):
    with time_machine.travel(T0, tick=False):
        names = ["h1", "h2", "h3"]
        for name in names:
            net.host(name, slots=4, reputation=0.8)
        ids = [net.submit_id() for _ in range(3)]
    assigned = sorted(Job.dangerously_unscoped.get(pk=i).host.name for i in ids)
    assert assigned == names


def test_assignment_records_last_assigned_at_and_attempts(net):
    with time_machine.travel(T0, tick=False):
        host, _ = net.host("h1")
        job_id = net.submit_id()
    host.refresh_from_db()
    job = net.job(job_id)
    assert host.last_assigned_at == T0 == job.leased_at
    assert job.lease_expires_at == T0 + timedelta(seconds=30)
    assert job.attempts == 1 and job.tried_hosts == [host.pk]
