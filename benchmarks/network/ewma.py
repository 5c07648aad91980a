"""Folding settled jobs into their host's TTFT and TPS EWMAs and reputation, exactly once.

A completion is recorded first (benchmarks/network/jobs.py); folding happens afterwards, in the Celery
task `fold_host_ewmas` that completions queue (at most one waits in the queue: a cache mark
the task clears before it reads), and in a periodic sweep that folds whatever a lost task or a
dead worker left behind. Both call `fold_pending()`, which folds every host with settled,
unfolded jobs, many hosts per transaction:

1. list the hosts with settled, unfolded jobs, in id order, from where the last batch ended;
2. lock those host rows, in id order, skipping any row another transaction holds (a completion
   in flight, which queues the next fold when it commits, or a pass or heartbeat): so folds of
   one host never overlap, a completion, which takes the same lock, cannot slip in between,
   and a fold never waits for anyone nor takes part in a deadlock;
3. read the locked hosts' settled, unfolded jobs in one query, per host in settlement order
   (`settled_at`, then id);
4. blend each into its host's figures, in that order;
5. claim them with one conditional UPDATE (`folded_at IS NULL`) whose row count must equal
   what was read, and save the hosts in one bulk UPDATE, in the same transaction.

Hosts skipped in step 2 are folded at the end one at a time by `fold_host()`, which waits for
the host's lock (one lock at a time: no deadlock either) and folds the same way.

A fold that dies before its commit changes nothing and the next one redoes it; a fold that
commits has marked its jobs, so a duplicate task or a retried completion finds nothing to do.

Samples (`scans.grader.ewma`, α = 0.3, the first sample sets the value):
- TTFT: the job's `ttft_ms`, when it has one (a completion with no tokens may have none);
- TPS: completion_tokens / (elapsed_ms / 1000), only when both are above zero (never a 0);
- reputation: 1 for a completed job, 0 for a job the host failed or let expire, with α = 0.1.
Failed jobs give no TTFT or TPS sample.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import cast

from django.db import transaction
from django.utils import timezone

from benchmarks.models import Host, Job, JobStatus
from benchmarks.network.system_wide import ALL_HOSTS, ALL_JOBS
from common.system_passes import PASS_ENDING_ERRORS, one_row
from scans.grader import ewma

log = logging.getLogger(__name__)

REPUTATION_ALPHA = 0.1  # slower than the speed EWMAs: one bad job should not sink a host
FOLD_BATCH = 1000  # jobs of one host per transaction (fold_host)
FOLD_HOSTS_PER_BATCH = 200  # hosts locked by one transaction of fold_pending
FOLD_JOBS_PER_BATCH = 2000  # jobs read by one transaction of fold_pending
FOLD_MAX_BATCHES = 50  # transactions of one fold task; it queues another for the rest
HOST_FIELDS = ["reputation", "ttft_ewma_ms", "tps_ewma"]
JOB_FIELDS = ["id", "host_id", "status", "ttft_ms", "completion_tokens", "elapsed_ms"]


class FoldRace(RuntimeError):
    """Another fold claimed some of these jobs first; this transaction is rolled back."""


def tps_sample(job: Job) -> float | None:
    if not job.completion_tokens or not job.elapsed_ms or job.elapsed_ms <= 0:
        return None
    return job.completion_tokens / (job.elapsed_ms / 1000)


def apply_completed(host: Host, job: Job) -> None:
    if job.ttft_ms is not None:
        host.ttft_ewma_ms = ewma(host.ttft_ewma_ms, job.ttft_ms)
    tps = tps_sample(job)
    if tps is not None:
        host.tps_ewma = ewma(host.tps_ewma, tps)
    host.reputation = ewma(host.reputation, 1.0, alpha=REPUTATION_ALPHA)


def apply_failure(host: Host) -> None:
    host.reputation = ewma(host.reputation, 0.0, alpha=REPUTATION_ALPHA)


def _unfolded():
    return ALL_JOBS.filter(settled_at__isnull=False, folded_at__isnull=True)


def _fold_locked(hosts: dict[int, Host], pending: list[Job], now: datetime) -> int:
    """Blend these jobs (per host in settlement order) into their locked hosts and claim them,
    inside the caller's transaction. Returns how many were folded."""
    if not pending:
        return 0
    touched: set[int] = set()
    for job in pending:
        host_id = cast(int, job.host_id)  # read by host: never null here
        host = hosts[host_id]
        touched.add(host_id)
        if job.status == JobStatus.COMPLETED:
            apply_completed(host, job)
        else:
            apply_failure(host)
    claimed = ALL_JOBS.filter(pk__in=[job.pk for job in pending], folded_at__isnull=True).update(
        folded_at=now
    )
    if claimed != len(pending):
        raise FoldRace(f"claimed {claimed} of {len(pending)} jobs")
    if len(touched) == 1:
        hosts[touched.pop()].save(update_fields=HOST_FIELDS)
    else:
        ALL_HOSTS.bulk_update([hosts[pk] for pk in sorted(touched)], HOST_FIELDS)
    return len(pending)


def fold_host(host_id: int, now: datetime | None = None) -> int:
    """Fold this host's settled, unfolded jobs (at most FOLD_BATCH), waiting for its lock.
    Returns how many were folded."""
    now = now or timezone.now()
    with transaction.atomic():
        host = ALL_HOSTS.select_for_update().only("id", *HOST_FIELDS).filter(pk=host_id).first()
        if host is None:
            return 0
        pending = list(
            _unfolded().filter(host_id=host_id).order_by("settled_at", "id").only(*JOB_FIELDS)[
                :FOLD_BATCH
            ]
        )
        return _fold_locked({host_id: host}, pending, now)


def _hosts_after(after_id: int, limit: int) -> list[int]:
    """The next `limit` hosts with settled, unfolded jobs, in id order."""
    return list(
        _unfolded()
        .filter(host_id__gt=after_id)
        .order_by("host_id")
        .values_list("host_id", flat=True)
        .distinct()[:limit]
    )


def _fold_batch(
    candidates: list[int], now: datetime | None, max_jobs: int
) -> tuple[int, int, list[int]]:
    """One transaction of fold_pending over these hosts (in id order). Returns (jobs folded,
    the host id to go on after, the hosts skipped because another transaction held them)."""
    with transaction.atomic():
        hosts = {
            host.pk: host
            for host in ALL_HOSTS.filter(pk__in=candidates)
            .order_by("pk")
            .select_for_update(skip_locked=True)
            .only("id", *HOST_FIELDS)
        }
        skipped = [pk for pk in candidates if pk not in hosts]  # held elsewhere, or deleted
        pending = list(
            _unfolded()
            .filter(host_id__in=sorted(hosts))
            .order_by("host_id", "settled_at", "id")
            .only(*JOB_FIELDS)[:max_jobs]
        )
        folded = _fold_locked(hosts, pending, now or timezone.now())
    if len(pending) == max_jobs:  # cut short: the next batch starts at its last host
        last = cast(int, pending[-1].host_id)
        return folded, last - 1, [pk for pk in skipped if pk < last]
    return folded, candidates[-1], skipped


def fold_pending(
    now: datetime | None = None,
    *,
    max_batches: int = FOLD_MAX_BATCHES,
    hosts_per_batch: int = FOLD_HOSTS_PER_BATCH,
    jobs_per_batch: int = FOLD_JOBS_PER_BATCH,
) -> tuple[int, bool]:
    """Fold every host's settled, unfolded jobs, `hosts_per_batch` hosts and at most
    `jobs_per_batch` jobs per transaction, once over the hosts in id order; hosts whose row was
    held elsewhere are folded at the end, one at a time. Returns (jobs folded, whether it got to
    the end: False after max_batches). Jobs settled meanwhile on hosts already passed are left
    to the next fold (their completions queue it). Each transaction stamps `folded_at` with its
    own time, unless `now` is given."""
    total = 0
    after_id = 0
    skipped: list[int] = []
    finished = False
    for _ in range(max_batches):
        candidates = _hosts_after(after_id, hosts_per_batch)
        if not candidates:
            finished = True
            break
        try:
            folded, after_id, held = _fold_batch(candidates, now, jobs_per_batch)
        except FoldRace:  # rolled back: someone else claimed some; these go one by one
            folded, after_id, held = 0, candidates[-1], candidates
        except PASS_ENDING_ERRORS:
            raise
        except Exception:  # noqa: BLE001 - one host's jobs failed to fold: rolled back, one by one
            folded, after_id, held = 0, candidates[-1], candidates
        total += folded
        skipped += held
    return total + _fold_each(skipped, now), finished


def _fold_each(host_ids: list[int], now: datetime | None) -> int:
    total = 0
    for host_id in host_ids:
        # A host whose jobs cannot be folded is logged and left for the next fold; the other
        # hosts are folded all the same (each fold_host is a transaction of its own).
        with one_row(log, f"folding the jobs of host {host_id}", atomic=False):
            try:
                while folded := fold_host(host_id, now):
                    total += folded
            except FoldRace:
                continue  # someone else folded them meanwhile: exactly what we wanted
    return total


def sweep(now: datetime | None = None) -> int:
    """Fold everything left behind. Returns how many jobs were folded."""
    return fold_pending(now, max_batches=10**6)[0]
