"""Folding settled jobs into their host's TTFT and TPS EWMAs and reputation, exactly once.

A completion is recorded first (benchmarks/jobs.py); folding happens afterwards, in the Celery
task `fold_host_ewmas(host_id)` that completion queues, and in a periodic sweep that folds
whatever a lost task or a dead worker left behind. Both call `fold_host()`:

1. lock the host row (so folds of one host never overlap, and a completion, which takes the
   same lock, cannot slip in between);
2. read its settled, unfolded jobs in settlement order (`settled_at`, then id);
3. blend each into the host's figures, in that order;
4. claim them with one conditional UPDATE (`folded_at IS NULL`) whose row count must equal
   what was read, and save the host, in the same transaction.

A fold that dies before its commit changes nothing and the next one redoes it; a fold that
commits has marked its jobs, so a duplicate task or a retried completion finds nothing to do.

Samples (`scans.grader.stats.ewma`, α = 0.3, the first sample sets the value):
- TTFT: the job's `ttft_ms`, when it has one (a completion with no tokens may have none);
- TPS: completion_tokens / (elapsed_ms / 1000), only when both are above zero (never a 0);
- reputation: 1 for a completed job, 0 for a job the host failed or let expire, with α = 0.1.
Failed jobs give no TTFT or TPS sample.
"""

from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django.utils import timezone

from benchmarks.models import Host, Job, JobStatus
from benchmarks.system_wide import ALL_HOSTS, ALL_JOBS
from scans.grader.stats import ewma

REPUTATION_ALPHA = 0.1  # slower than the speed EWMAs: one bad job should not sink a host
FOLD_BATCH = 1000


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


def fold_host(host_id: int, now: datetime | None = None) -> int:
    """Fold this host's settled, unfolded jobs. Returns how many were folded."""
    now = now or timezone.now()
    with transaction.atomic():
        host = (
            ALL_HOSTS.select_for_update()
            .only("id", "reputation", "ttft_ewma_ms", "tps_ewma")
            .filter(pk=host_id)
            .first()
        )
        if host is None:
            return 0
        pending = list(
            ALL_JOBS.filter(
                host_id=host_id, settled_at__isnull=False, folded_at__isnull=True
            )
            .order_by("settled_at", "id")
            .only("id", "status", "ttft_ms", "completion_tokens", "elapsed_ms")[:FOLD_BATCH]
        )
        if not pending:
            return 0
        for job in pending:
            if job.status == JobStatus.COMPLETED:
                apply_completed(host, job)
            else:
                apply_failure(host)
        claimed = ALL_JOBS.filter(
            pk__in=[job.pk for job in pending], folded_at__isnull=True
        ).update(folded_at=now)
        if claimed != len(pending):
            raise FoldRace(f"host {host_id}: claimed {claimed} of {len(pending)} jobs")
        host.save(update_fields=["reputation", "ttft_ewma_ms", "tps_ewma"])
        return len(pending)


def hosts_with_unfolded_jobs(limit: int = 1000) -> list[int]:
    return list(
        ALL_JOBS.filter(
            settled_at__isnull=False, folded_at__isnull=True, host__isnull=False
        )
        .order_by()
        .values_list("host_id", flat=True)
        .distinct()[:limit]
    )


def sweep(now: datetime | None = None) -> int:
    """Fold everything left behind. Returns how many jobs were folded."""
    total = 0
    for host_id in hosts_with_unfolded_jobs():
        try:
            total += fold_host(host_id, now)
        except FoldRace:
            continue  # someone else folded them meanwhile: exactly what we wanted
    return total
