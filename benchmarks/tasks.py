"""Celery tasks of the network. Each takes ids, is safe to run twice and writes in a transaction.

They are acknowledged on receipt (the project default): a task lost with a dying worker is
covered by the periodic sweep and tick, which redo whatever it left undone.
"""

from __future__ import annotations

from celery import shared_task


@shared_task(autoretry_for=(Exception,), retry_backoff=True, max_retries=5)
def fold_host_ewmas(host_id: int) -> int:
    """Fold a host's settled, unfolded jobs into its EWMAs (queued by completions)."""
    from django.core.cache import cache

    from benchmarks import ewma, jobs

    cache.delete(jobs.fold_pending_key(host_id))  # before reading: later completions queue anew
    total = 0
    while folded := ewma.fold_host(host_id):
        total += folded
    return total


@shared_task
def sweep_unfolded() -> int:
    """Periodic: fold whatever a lost task or a dead worker left behind."""
    from benchmarks import ewma

    return ewma.sweep()


@shared_task
def network_tick() -> int:
    """Periodic: expire leases, fail jobs past the queue deadline, run an assignment pass."""
    from benchmarks import jobs, routing

    jobs.housekeeping()
    return routing.assignment_pass()
