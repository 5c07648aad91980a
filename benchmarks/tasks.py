"""Celery tasks of the network. Each takes ids, is safe to run twice and writes in a transaction.

They are acknowledged on receipt (the project default): a task lost with a dying worker is
covered by the periodic sweep and tick, which redo whatever it left undone.

Imports go one way: tasks use jobs, routing and ewma; none of those imports this module
(benchmarks/network/services.py queues the fold after a completion).
"""

from __future__ import annotations

import contextlib

from celery import shared_task
from django.core.cache import cache
from django.db import transaction

from benchmarks.network import ewma, jobs, routing
from benchmarks.public import cache as public_cache
from common.cache_outage import CACHE_ERRORS, warn

FOLD_PENDING_KEY = "benchmarks:fold-pending"
# Assignment passes run on a queue of their own, served by a worker of their own in production
# (docs/operations.md), so folds never wait behind them.
PASS_QUEUE = "passes"  # noqa: S105 - a queue name, not a secret


def queue_fold() -> None:
    """After the current transaction commits, queue a fold, unless one is queued and has not
    started yet: that one will read this job too (the task clears the mark before it reads).
    One fold folds every host with settled, unfolded jobs, so no host needs a mark of its
    own. Robust: if the broker or the cache is down,
    the job stays recorded and the periodic sweep folds it."""

    def enqueue() -> None:
        try:
            first = cache.add(FOLD_PENDING_KEY, 1, timeout=60)
        except CACHE_ERRORS as exc:
            warn("fold queued without the pending mark", exc)
            first = True
        if not first:
            return
        try:
            fold_host_ewmas.delay()
        except Exception as exc:  # noqa: BLE001 - kombu's errors vary by transport
            warn("fold left to the sweep", exc)
            with contextlib.suppress(*CACHE_ERRORS):
                cache.delete(FOLD_PENDING_KEY)  # so the next completion tries again

    transaction.on_commit(enqueue, robust=True)


PASS_PENDING_KEY = "benchmarks:pass-pending"  # noqa: S105 - a cache key, not a secret


def request_pass() -> bool:
    """Queue an assignment pass unless one is queued and has not started yet (it will see
    these jobs too: the task clears the mark before it reads the queue). Call it after the
    commit that queued a job or freed a slot. Robust: with the broker or the cache down the
    jobs wait for the tick (5 s). True when the pass ran inside this call (eager Celery: the
    tests), so only then is it worth looking again at once."""
    try:
        first = cache.add(PASS_PENDING_KEY, 1, timeout=30)
    except CACHE_ERRORS as exc:
        warn("pass queued without the pending mark", exc)
        first = True
    if not first:
        return False
    try:
        assign_queued_jobs.delay()
    except Exception as exc:  # noqa: BLE001 - kombu's errors vary by transport
        warn("assignment pass left to the tick", exc)
        with contextlib.suppress(*CACHE_ERRORS):
            cache.delete(PASS_PENDING_KEY)
        return False
    return bool(assign_queued_jobs.app.conf.task_always_eager)


@shared_task(ignore_result=True, queue=PASS_QUEUE)
def assign_queued_jobs() -> int:
    """Assign queued jobs to free hosts: one pass over many jobs and hosts (after the one in
    flight, if any); the hosts given work are woken (benchmarks/network/wakeup.py)."""
    with contextlib.suppress(*CACHE_ERRORS):
        cache.delete(PASS_PENDING_KEY)  # before reading: later requests queue anew
    return routing.assign_queued()


@shared_task(autoretry_for=(Exception,), retry_backoff=True, max_retries=5)
def fold_host_ewmas(host_id: int | None = None) -> int:
    """Fold every host's settled, unfolded jobs into its EWMAs (queued by completions; at most
    one waits in the queue). `host_id`, which messages queued before folds went in batches
    carry, is not needed: that host is folded with the others."""
    with contextlib.suppress(*CACHE_ERRORS):
        cache.delete(FOLD_PENDING_KEY)  # before reading: later completions queue anew
    folded, finished = ewma.fold_pending()
    if not finished:  # a backlog bigger than one task's batches: the rest in the next task
        queue_fold()
    return folded


@shared_task
def sweep_unfolded() -> int:
    """Periodic: fold whatever a lost task or a dead worker left behind."""
    return ewma.sweep()


@shared_task
def network_tick() -> int:
    """Periodic: expire leases, fail jobs past the queue deadline, run an assignment pass."""
    jobs.housekeeping()
    return routing.assign_queued()


@shared_task(ignore_result=True)
def refresh_public_benchmarks() -> str:
    """Rebuild the public snapshot behind /benchmarks (and the live JSON) so no visitor pays
    for it (every REFRESH_EVERY_S, from the beat). Safe to run twice: each run builds a fresh
    snapshot at its own coordinator time and replaces the cached one; it writes nothing to the
    database."""
    return public_cache.refresh()["generated_at"]
