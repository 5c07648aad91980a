"""Folding completed jobs into host EWMAs: exactly once, in completion order per host, whatever
gets delivered twice or dies half-way. Expected values are computed by hand (α = 0.3)."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.db import transaction

from benchmarks import tasks
from benchmarks.models import Job
from benchmarks.network import ewma
from tests.helpers.network import T0, make_catalog

# (ttft_ms, completion_tokens, elapsed_ms) → TPS 20, 50, 10
RUNS = [(100.0, 20, 1000.0), (200.0, 100, 2000.0), (400.0, 10, 1000.0)]
TTFT_BY_HAND = 0.3 * 400 + 0.7 * (0.3 * 200 + 0.7 * 100)  # 100 → 130 → 211
TPS_BY_HAND = 0.3 * 10 + 0.7 * (0.3 * 50 + 0.7 * 20)  # 20 → 29 → 23.3
REPUTATION_BY_HAND = 1 - 0.9 ** 3 * 0.5  # three successes from 0.5 with α = 0.1


def _complete_all(net, token, runs=RUNS, clock=None):
    ids = []
    for step, (ttft, tokens, elapsed) in enumerate(runs, start=1):
        if clock is not None:
            clock.move_to(T0 + timedelta(seconds=10 * step))
        net.submit_id(max_tokens=128)
        ids.append(net.run(token, ttft_ms=ttft, completion_tokens=tokens, elapsed_ms=elapsed))
    return ids


def test_completions_fold_into_the_ewmas_as_computed_by_hand(net, django_capture_on_commit_callbacks):
    host, token = net.host("h1")
    with django_capture_on_commit_callbacks(execute=True):
        _complete_all(net, token)
    host.refresh_from_db()
    assert host.ttft_ewma_ms == pytest.approx(211.0)
    assert host.tps_ewma == pytest.approx(23.3)
    assert host.reputation == pytest.approx(REPUTATION_BY_HAND)
    assert TTFT_BY_HAND == pytest.approx(211.0) and TPS_BY_HAND == pytest.approx(23.3)


def test_the_first_sample_sets_the_value(net, django_capture_on_commit_callbacks):
    host, token = net.host("h1")
    with django_capture_on_commit_callbacks(execute=True):
        _complete_all(net, token, runs=[(150.0, 30, 1500.0)])
    host.refresh_from_db()
    assert (host.ttft_ewma_ms, host.tps_ewma) == (150.0, 20.0)


def test_duplicate_deliveries_fold_each_job_exactly_once(net, django_capture_on_commit_callbacks):
    host, token = net.host("h1")
    with django_capture_on_commit_callbacks(execute=True):
        ids = _complete_all(net, token)
        for job_id, (ttft, tokens, elapsed) in zip(ids, RUNS, strict=True):
            # the host retries its completion, and the broker redelivers the fold task
            net.complete(token, job_id, ttft_ms=ttft, completion_tokens=tokens, elapsed_ms=elapsed)
            tasks.fold_host_ewmas.delay(host.pk)
            tasks.fold_host_ewmas.delay(host.pk)
    tasks.sweep_unfolded.delay()
    ewma.sweep()
    host.refresh_from_db()
    assert host.ttft_ewma_ms == pytest.approx(TTFT_BY_HAND)
    assert host.tps_ewma == pytest.approx(TPS_BY_HAND)
    assert host.reputation == pytest.approx(REPUTATION_BY_HAND)
    assert Job.dangerously_unscoped.filter(folded_at__isnull=True).count() == 0


def test_a_fold_that_dies_before_commit_changes_nothing_and_is_redone_once(net):
    host, token = net.host("h1")
    _complete_all(net, token)  # on_commit never runs here: the fold tasks are "lost"

    class WorkerDied(Exception):
        pass

    with pytest.raises(WorkerDied), transaction.atomic():
        assert ewma.fold_host(host.pk) == 3
        raise WorkerDied
    host.refresh_from_db()
    assert host.ttft_ewma_ms is None
    assert Job.dangerously_unscoped.filter(folded_at__isnull=True).count() == 3
    assert ewma.sweep() == 3
    assert ewma.sweep() == 0
    host.refresh_from_db()
    assert host.ttft_ewma_ms == pytest.approx(TTFT_BY_HAND)


def test_jobs_fold_in_completion_order_not_submission_order(net):
    with time_machine.travel(T0, tick=False) as clock:
        host, token = net.host("h1", slots=3)
        ids = []
        for step in range(3):  # distinct submission times, so submission order is knowable
            clock.move_to(T0 + timedelta(milliseconds=100 * step))
            ids.append(net.submit_id(max_tokens=128))
        for _ in ids:
            net.lease(token)
        # completed last-submitted first
        for step, (job_id, (ttft, tokens, elapsed)) in enumerate(zip(reversed(ids), RUNS, strict=True)):
            clock.move_to(T0 + timedelta(seconds=5 + step))
            response = net.complete(token, job_id, ttft_ms=ttft, completion_tokens=tokens,
                                    elapsed_ms=elapsed)
            assert response.status_code == 200
        assert ewma.fold_host(host.pk) == 3
    host.refresh_from_db()
    assert host.ttft_ewma_ms == pytest.approx(TTFT_BY_HAND)
    assert host.tps_ewma == pytest.approx(TPS_BY_HAND)


def test_a_late_fold_continues_from_the_folded_value(net):
    host, token = net.host("h1")
    _complete_all(net, token, runs=RUNS[:2])
    assert ewma.fold_host(host.pk) == 2
    _complete_all(net, token, runs=RUNS[2:])
    assert ewma.sweep() == 1
    host.refresh_from_db()
    assert host.ttft_ewma_ms == pytest.approx(TTFT_BY_HAND)


def test_no_tokens_or_no_elapsed_time_records_no_tps_sample(net):
    host, token = net.host("h1")
    _complete_all(net, token, runs=[(100.0, 20, 1000.0), (None, 0, 800.0), (0.0, 12, 0.0)])
    ewma.sweep()
    host.refresh_from_db()
    assert host.tps_ewma == 20.0  # never blended with a 0
    assert host.ttft_ewma_ms == pytest.approx(0.7 * 100.0)  # the 0 ms TTFT is a real sample


def test_folding_one_host_leaves_the_others_alone(net):
    a, a_token = net.host("a")
    b, _ = net.host("b")
    _complete_all(net, a_token, runs=RUNS[:1])
    ewma.fold_host(b.pk)
    a.refresh_from_db()
    assert a.ttft_ewma_ms is None
    ewma.fold_host(a.pk)
    a.refresh_from_db()
    b.refresh_from_db()
    assert a.ttft_ewma_ms == 100.0 and b.ttft_ewma_ms is None


def test_the_fold_stamps_folded_at(net):
    with time_machine.travel(T0, tick=False):
        host, token = net.host("h1")
        job_id = _complete_all(net, token, runs=RUNS[:1])[0]
        assert net.job(job_id).folded_at is None
        ewma.fold_host(host.pk)
        assert net.job(job_id).folded_at == T0


# By hand after the first 1, 2 or 3 of RUNS (α = 0.3; reputation from 0.5 with α = 0.1).
BY_HAND = {
    1: (100.0, 20.0, 1 - 0.9 * 0.5),
    2: (0.3 * 200 + 0.7 * 100, 0.3 * 50 + 0.7 * 20, 1 - 0.9 ** 2 * 0.5),
    3: (TTFT_BY_HAND, TPS_BY_HAND, REPUTATION_BY_HAND),
}


def _fleet(net, runs_per_host=(1, 2, 3, 1, 2)):
    """Hosts with settled, unfolded jobs: the n-th host ran the first runs_per_host[n] of RUNS.
    Each host serves a model of its own, so each job goes to the host meant to run it."""
    fleet = []
    for n, count in enumerate(runs_per_host):
        model = f"fleet-{n}-q4"
        make_catalog(model)
        host, token = net.host(f"h{n}", models=(model,))
        for ttft, tokens, elapsed in RUNS[:count]:
            net.submit_id(model=model, max_tokens=128)
            net.run(token, ttft_ms=ttft, completion_tokens=tokens, elapsed_ms=elapsed)
        fleet.append((host, count))
    return fleet


def _assert_folded_by_hand(fleet):
    for host, count in fleet:
        host.refresh_from_db()
        ttft, tps, reputation = BY_HAND[count]
        assert host.ttft_ewma_ms == pytest.approx(ttft), host.name
        assert host.tps_ewma == pytest.approx(tps), host.name
        assert host.reputation == pytest.approx(reputation), host.name


def test_one_fold_task_folds_every_host_with_settled_jobs(net):
    fleet = _fleet(net)  # on_commit never runs here: no fold has run yet
    assert Job.dangerously_unscoped.filter(folded_at__isnull=True).count() == 9
    assert tasks.fold_host_ewmas() == 9
    _assert_folded_by_hand(fleet)
    assert not Job.dangerously_unscoped.filter(folded_at__isnull=True).exists()
    assert tasks.fold_host_ewmas() == 0  # a duplicate finds nothing


def test_small_batches_cut_hosts_short_and_keep_each_hosts_order(net):
    fleet = _fleet(net)
    # Two hosts and two jobs per transaction: a host's jobs are split across transactions.
    assert ewma.fold_pending(hosts_per_batch=2, jobs_per_batch=2) == (9, True)
    _assert_folded_by_hand(fleet)
    assert ewma.sweep() == 0


def test_a_fold_cut_off_after_its_first_batch_leaves_the_rest_to_the_next(net):
    fleet = _fleet(net)
    assert ewma.fold_pending(hosts_per_batch=2, max_batches=1) == (3, False)  # h0 and h1 only
    for host, _ in fleet[2:]:
        host.refresh_from_db()
        assert host.ttft_ewma_ms is None
    assert ewma.fold_pending(hosts_per_batch=2) == (6, True)
    _assert_folded_by_hand(fleet)


def test_a_batched_fold_that_dies_before_commit_changes_nothing(net):
    fleet = _fleet(net)

    class WorkerDied(Exception):
        pass

    with pytest.raises(WorkerDied), transaction.atomic():
        assert ewma.fold_pending(hosts_per_batch=2, jobs_per_batch=2) == (9, True)
        raise WorkerDied
    for host, _ in fleet:
        host.refresh_from_db()
        assert (host.ttft_ewma_ms, host.tps_ewma, host.reputation) == (None, None, 0.5)
    assert Job.dangerously_unscoped.filter(folded_at__isnull=True).count() == 9
    assert tasks.fold_host_ewmas() == 9  # redone once
    assert tasks.fold_host_ewmas() == 0
    _assert_folded_by_hand(fleet)


def test_completions_on_many_hosts_queue_folds_that_fold_each_once(
        net, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        fleet = _fleet(net)
    _assert_folded_by_hand(fleet)
    assert not Job.dangerously_unscoped.filter(folded_at__isnull=True).exists()
