r"""Job services: submit, hand out, start, complete, fail, and the clocks that expire leases.

The life of a job (docs/routing.md):

    queued --assignment pass--> leased --start--> running --complete--> completed
       ^                          |                  |         \--fail--> failed
       |   lease or run deadline  |                  |
       +------- passed -----------+------------------+   (at most NETWORK_MAX_ATTEMPTS hosts,
                                                          then failed: attempts_exhausted)
    queued longer than the queue deadline --> failed: no_host

Every transition is a conditional UPDATE or happens under a row lock, so two callers can never
both win. Locks are always taken host row first, then job row (never the other way round).
Completion records the job first; the host's EWMAs are folded later (benchmarks/network/ewma.py).

This module knows jobs and hosts' rows only: it never runs an assignment pass
(benchmarks/network/routing.py) and never queues a task (benchmarks/tasks.py); benchmarks/network/services.py
strings the steps of each HTTP call together.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.core.cache import cache
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from accounts.models import Team
from benchmarks import policy
from benchmarks.models import ACTIVE, CatalogModel, Host, Job, JobStatus
from benchmarks.network import ewma, rows
from benchmarks.network.system_wide import ALL_HOSTS, ALL_JOBS
from common.cache_outage import CACHE_ERRORS, warn
from common.system_passes import one_row

log = logging.getLogger(__name__)

REASON_NO_HOST = "no_host"
REASON_ATTEMPTS = "attempts_exhausted"
HOST_REASON_PREFIX = "host: "
# A completion may count a few tokens over max_tokens (stop tokens, tokenizer differences);
# "far above" is more than max_tokens + max(8, 10 %).
TOKEN_SLACK_MIN, TOKEN_SLACK_SHARE = 8, 0.10
# A host's own elapsed time cannot exceed the time since the coordinator assigned the job,
# give or take this much (request latency, clock granularity).
ELAPSED_SLACK_MS = 5_000
# No consumer machine streams faster than this; a higher figure is a bad report, not a sample.
MAX_PLAUSIBLE_TPS = 20_000


class JobError(Exception):
    """Base class; the API turns each subclass into one status code."""


class UnknownCatalogModel(JobError):
    """A catalog id that is unknown or inactive, or max_tokens over its context length (422).

    `problems` names each refused item of a submission by its index: {index: {field: why}};
    the message is the first one's."""

    def __init__(self, problems: dict[int, dict[str, str]]):
        self.problems = problems
        super().__init__(next(iter(next(iter(problems.values())).values())))


class NotYourJob(JobError):
    """The job does not exist or is not leased to the calling host (404)."""


class JobConflict(JobError):
    """The call does not fit the job's state, e.g. completing a failed job (409)."""


class BadFigures(JobError):
    """Negative or absurd figures in a completion (400); nothing is recorded."""


class NoHostOnline(JobError):
    """No online host advertises the model (503): the job is not created, so a buyer cannot
    fill the public figures with `no_host` failures of jobs nobody could ever have taken."""

    def __init__(self, model_id: str):
        self.model_id = model_id
        super().__init__(f"No online host serves {model_id} right now; no job was created. "
                         "Try again later.")


class TooManyUnsettledJobs(JobError):
    """The team's unsettled jobs and these would be more than it may have (429); no job is
    created."""

    def __init__(self, limit: int, unsettled: int | None = None, asked: int = 1):
        self.limit = limit
        if asked == 1:
            super().__init__(
                f"This team already has {limit} unsettled jobs (queued, leased or running), the "
                "most it may have: submit more once some have completed or failed."
            )
        else:
            super().__init__(
                f"This team has {unsettled} unsettled jobs (queued, leased or running); {asked} "
                f"more would be over the most it may have ({limit}): submit fewer, or more once "
                "some have completed or failed."
            )


@dataclass(frozen=True)
class Submission:
    """One job a buyer asks for."""

    model_id: str
    messages: list
    max_tokens: int


@dataclass(frozen=True)
class Figures:
    ttft_ms: float | None
    completion_tokens: int
    elapsed_ms: float


# --- buyers ----------------------------------------------------------------------------------


def submit(team, model_id: str, messages: list, max_tokens: int, now: datetime | None = None) -> Job:
    """Record a queued job (the caller then queues an assignment pass: benchmarks/network/services.py)."""
    return submit_many(team, [Submission(model_id, messages, max_tokens)], now)[0]


def submit_many(team, items: Sequence[Submission], now: datetime | None = None) -> list[Job]:
    """Record queued jobs, all or none, in the order given (the caller queues one pass).

    Every item is checked against the catalog first (UnknownCatalogModel names each refused
    one), then each distinct model against the online hosts (NoHostOnline), then the team's
    unsettled jobs plus these against its cap (TooManyUnsettledJobs), under the team's row
    lock; the rows go in with one INSERT. Each job is stamped a microsecond after the one
    before it, so the queue (first in, first out by created_at) keeps the batch's order."""
    if not items:
        return []
    catalog = {model.pk: model for model in CatalogModel.objects.filter(
        pk__in={item.model_id for item in items}, active=True)}
    problems: dict[int, dict[str, str]] = {}
    for index, item in enumerate(items):
        model = catalog.get(item.model_id)
        if model is None:
            problems[index] = {"model": f"unknown or inactive catalog id: {item.model_id}"}
        elif item.max_tokens > model.context_len:
            problems[index] = {"model": f"max_tokens {item.max_tokens} exceeds the context length "
                                        f"of {item.model_id} ({model.context_len})"}
    if problems:
        raise UnknownCatalogModel(problems)
    now = now or timezone.now()
    if policy.value("NETWORK_REQUIRE_ONLINE_HOST"):
        # Any team's host will do: routing matches jobs to hosts across teams.
        for model_id in dict.fromkeys(item.model_id for item in items):
            if not ALL_HOSTS.online_for(model_id, now).exists():
                raise NoHostOnline(model_id)
    limit = policy.value("NETWORK_MAX_UNSETTLED_PER_TEAM")
    with transaction.atomic():
        # One submission per team at a time, so concurrent calls cannot both pass the count.
        # FOR NO KEY UPDATE: rows that merely reference the team are not blocked.
        Team.objects.for_team(team.pk).select_for_update(no_key=True).values_list("pk").get()
        unsettled = Job.objects.for_team(team).filter(settled_at__isnull=True).count()
        if unsettled + len(items) > limit:
            raise TooManyUnsettledJobs(limit, unsettled, len(items))
        return Job.objects.for_team(team).bulk_create([
            Job(team=team, model=catalog[item.model_id], max_tokens=item.max_tokens,
                request_json={"messages": item.messages, "max_tokens": item.max_tokens},
                created_at=now + timedelta(microseconds=index), queued_at=now)
            for index, item in enumerate(items)
        ])


# --- hosts -----------------------------------------------------------------------------------


def lease(host: Host, now: datetime | None = None, start: bool = False,
          after: Job | None = None) -> Job | None:
    """Hand the host the oldest job assigned to it that it has not received, or None.

    With `start`, the job is started in the same statement (leased -> running), which saves
    the host a `start` call. One statement, the claim of PostgreSQL job queues: an UPDATE of
    the row a `FOR UPDATE SKIP LOCKED` subquery picks, RETURNING it, so concurrent lease calls
    of one host (several slots) take different jobs instead of waiting on each other, and the
    conditions repeated in the UPDATE make sure only one of them wins a row. The assignment
    pass that fills the host's queue runs before this (a worker task: benchmarks/network/routing.py).
    `after`: the completed job this one follows (lease_next); the same statement records the
    job handed out on it (`next_job_id`), for a repeated completion to get it again.
    """
    now = now or timezone.now()
    if host.suspended:
        return None
    # A job whose lease ran out is left to the expiry sweep, which hands it to another host.
    # The jobs are buyers' (teams the host never learns): the host's own, found by host_id.
    sets: list[str] = ["delivered_at = %s"]
    params: list[object] = [now]
    if start:
        sets += ["status = %s", "started_at = %s", "lease_expires_at = %s"]
        params += [JobStatus.RUNNING, now,
                   now + timedelta(seconds=policy.value("NETWORK_RUN_TIMEOUT_S"))]
    table = Job._meta.db_table
    claim = (
        f"UPDATE {table} SET {', '.join(sets)} WHERE id = ("  # noqa: S608 - names are ours
        f"SELECT id FROM {table} WHERE host_id = %s AND status = %s "
        "AND delivered_at IS NULL AND lease_expires_at >= %s "
        "ORDER BY leased_at, created_at, id LIMIT 1 FOR UPDATE SKIP LOCKED"
        f") AND status = %s AND delivered_at IS NULL RETURNING {rows.columns(Job, table)}")
    params += [host.pk, JobStatus.LEASED, now, JobStatus.LEASED]
    if after is not None:
        # Still one statement: PostgreSQL runs a data-modifying WITH part whether or not the
        # outer query reads it.
        claim = (f"WITH claimed AS ({claim}), noted AS (UPDATE {table} "  # noqa: S608
                 "SET next_job_id = (SELECT id FROM claimed) WHERE id = %s "
                 f"AND EXISTS (SELECT 1 FROM claimed)) SELECT {rows.columns(Job, 'claimed')} "
                 "FROM claimed")
        params.append(after.pk)
    claimed = rows.fetch(Job, claim, params)  # plain SQL: benchmarks/network/rows.py
    return claimed[0] if claimed else None


def _locked(host: Host, job_id) -> Job:
    """Lock the host row, then the job row, in one statement; the job must be this host's
    (else 404). The host is locked in the materialized WITH part, which the outer query must
    read before it can produce (and so lock) the job row: the order stays host, then job. A
    job changed while this waited comes back as it is now (FOR UPDATE reads the latest row).
    Plain SQL, as `lease` (benchmarks/network/rows.py)."""
    found = rows.fetch(Job, (
        f"WITH locked_host AS MATERIALIZED (SELECT id FROM {Host._meta.db_table} "  # noqa: S608
        f"WHERE id = %s FOR UPDATE) SELECT {rows.columns(Job, 'job')} FROM {Job._meta.db_table} "
        "job JOIN locked_host ON job.host_id = locked_host.id WHERE job.id = %s "
        "FOR UPDATE OF job"), [host.pk, job_id])
    if not found:
        raise NotYourJob("no such job leased to this host")
    return found[0]


_JOB_COLUMNS = {field.name: field for field in Job._meta.concrete_fields}


def _save(job: Job, names: list[str]) -> None:
    """`job.save(update_fields=names)` as one plain UPDATE, for the hot path (a completion):
    the same values, prepared by each field as the ORM prepares them. Job has no save signals."""
    fields = [_JOB_COLUMNS[name] for name in names]
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {Job._meta.db_table} SET "  # noqa: S608 - column names are ours
            f"{', '.join(f'{field.column} = %s' for field in fields)} WHERE id = %s",
            [*(field.get_db_prep_save(getattr(job, field.attname), connection)
               for field in fields), job.pk])


def start(host: Host, job_id, now: datetime | None = None) -> Job:
    now = now or timezone.now()
    with transaction.atomic():
        job = _locked(host, job_id)
        if job.status == JobStatus.RUNNING:
            return job  # a repeated start: same answer, nothing changes
        if job.status != JobStatus.LEASED:
            raise JobConflict(f"job is {job.status}")
        if job.lease_expires_at is not None and job.lease_expires_at < now:
            # Too late: the sweep hands it to another host; it must not run here as well.
            raise JobConflict("the lease expired before start")
        job.status = JobStatus.RUNNING
        job.started_at = now
        job.delivered_at = job.delivered_at or now
        job.lease_expires_at = now + timedelta(seconds=policy.value("NETWORK_RUN_TIMEOUT_S"))
        job.save(update_fields=["status", "started_at", "delivered_at", "lease_expires_at"])
        return job


def check_figures(job: Job, figures: Figures, now: datetime) -> None:
    """Refuse negative or absurd figures; zero tokens or zero elapsed time are fine."""
    ttft, tokens, elapsed = figures.ttft_ms, figures.completion_tokens, figures.elapsed_ms
    for name, value in (("ttft_ms", ttft), ("elapsed_ms", elapsed), ("completion_tokens", tokens)):
        if value is None:
            continue
        if isinstance(value, float) and not math.isfinite(value):
            raise BadFigures(f"{name} must be a finite number")
        if value < 0:
            raise BadFigures(f"{name} must not be negative")
    if ttft is None and tokens > 0:
        raise BadFigures("ttft_ms is required when completion_tokens > 0")
    if ttft is not None and ttft > elapsed:
        raise BadFigures("ttft_ms cannot be greater than elapsed_ms")
    slack = max(TOKEN_SLACK_MIN, math.ceil(job.max_tokens * TOKEN_SLACK_SHARE))
    if tokens > job.max_tokens + slack:
        raise BadFigures(f"completion_tokens {tokens} is far above max_tokens {job.max_tokens}")
    held_ms = (now - (job.leased_at or now)).total_seconds() * 1000
    if elapsed > held_ms + ELAPSED_SLACK_MS:
        raise BadFigures("elapsed_ms is longer than the host has held the job")
    # Multiplied, not divided: a denormal elapsed time divides by zero once scaled to seconds.
    if elapsed > 0 and tokens > MAX_PLAUSIBLE_TPS * elapsed / 1000:
        raise BadFigures("completion_tokens / elapsed_ms is not a plausible speed")


def complete(host: Host, job_id, figures: Figures, result,
             now: datetime | None = None) -> tuple[Job, bool]:
    """Record the completion (settles the job): (the job, True), or for a repeated call (the
    stored job, False)."""
    now = now or timezone.now()
    with transaction.atomic():
        job = _locked(host, job_id)
        if job.status == JobStatus.COMPLETED:
            return job, False
        if job.status not in ACTIVE:
            raise JobConflict(f"job is {job.status}")
        check_figures(job, figures, now)
        job.status = JobStatus.COMPLETED
        job.started_at = job.started_at or job.delivered_at or now
        job.completed_at = job.settled_at = now
        job.lease_expires_at = None
        job.ttft_ms = figures.ttft_ms
        job.completion_tokens = figures.completion_tokens
        job.elapsed_ms = figures.elapsed_ms
        job.result_json = result
        _save(job, [
            "status", "started_at", "completed_at", "settled_at", "lease_expires_at", "ttft_ms",
            "completion_tokens", "elapsed_ms", "result_json",
        ])
        return job, True


def handed_next(host: Host, completed: Job) -> Job | None:
    """The job this completion handed out, while this host still runs it: the answer to a
    repeated completion, whose first answer the host may never have received."""
    if completed.next_job_id is None:
        return None
    return ALL_JOBS.filter(pk=completed.next_job_id, host_id=host.pk,
                           status=JobStatus.RUNNING).first()


def fail(host: Host, job_id, reason: str, now: datetime | None = None) -> Job:
    """The host could not run the job: it settles as failed and lowers the host's reputation."""
    now = now or timezone.now()
    with transaction.atomic():
        job = _locked(host, job_id)
        if job.status == JobStatus.FAILED:
            return job
        if job.status not in ACTIVE:
            raise JobConflict(f"job is {job.status}")
        job.status = JobStatus.FAILED
        job.settled_at = now
        job.lease_expires_at = None
        job.failure_reason = (HOST_REASON_PREFIX + reason.strip())[:200]
        job.save(update_fields=["status", "settled_at", "lease_expires_at", "failure_reason"])
        return job


# --- clocks: lease expiry, queue deadline ----------------------------------------------------


def expire_leases(now: datetime | None = None, limit: int = 500) -> int:
    """Jobs whose lease or run deadline passed go back to the queue for a different host
    (or fail once they have used every attempt). Each expiry lowers the host's reputation."""
    now = now or timezone.now()
    overdue = list(
        ALL_JOBS.filter(status__in=ACTIVE, lease_expires_at__lt=now)
        .order_by("lease_expires_at")
        .values_list("pk", "host_id")[:limit]
    )
    expired = 0
    for job_id, host_id in overdue:
        # One transaction per job; one that fails is logged and expired again at the next
        # pass, and the other hosts' jobs are expired all the same.
        with one_row(log, f"expiring the lease of job {job_id} on host {host_id}"):
            host = ALL_HOSTS.select_for_update().filter(pk=host_id).first()
            job = (
                ALL_JOBS.select_for_update(skip_locked=True)
                .filter(pk=job_id, host_id=host_id, status__in=ACTIVE, lease_expires_at__lt=now)
                .first()
            )
            if job is None or host is None:
                continue
            ewma.apply_failure(host)
            host.save(update_fields=["reputation"])
            if job.attempts >= policy.value("NETWORK_MAX_ATTEMPTS"):
                # Its reputation sample was just applied, so there is nothing left to fold.
                ALL_JOBS.filter(pk=job.pk).update(
                    status=JobStatus.FAILED, settled_at=now, folded_at=now,
                    lease_expires_at=None, failure_reason=REASON_ATTEMPTS,
                )
            else:
                _requeue(job.pk, now)
            expired += 1
    return expired


def _requeue(job_id, now: datetime) -> None:
    ALL_JOBS.filter(pk=job_id).update(
        status=JobStatus.QUEUED, host=None, queued_at=now, leased_at=None, delivered_at=None,
        lease_expires_at=None, started_at=None,
    )


def fail_past_queue_deadline(now: datetime | None = None) -> int:
    """Queued jobs that found no eligible host in time fail with reason `no_host`."""
    now = now or timezone.now()
    cutoff = now - timedelta(seconds=policy.value("NETWORK_QUEUE_DEADLINE_S"))
    # One conditional UPDATE: a job a pass assigns meanwhile no longer matches status=queued.
    return ALL_JOBS.filter(status=JobStatus.QUEUED, queued_at__lt=cutoff).update(
        status=JobStatus.FAILED, settled_at=now, folded_at=now, failure_reason=REASON_NO_HOST
    )


def release_host_jobs(host_id: int, include_running: bool, now: datetime | None = None) -> int:
    """A suspended or revoked host's jobs go back to the queue (this is not the job's fault,
    so the attempt is given back)."""
    now = now or timezone.now()
    statuses = list(ACTIVE) if include_running else [JobStatus.LEASED]
    with transaction.atomic():
        ALL_HOSTS.select_for_update().filter(pk=host_id).values_list("pk").first()
        ids = list(
            ALL_JOBS.select_for_update()
            .filter(host_id=host_id, status__in=statuses)
            .values_list("pk", flat=True)
        )
        for job_id in ids:
            _requeue(job_id, now)
        ALL_JOBS.filter(pk__in=ids, attempts__gt=0).update(attempts=F("attempts") - 1)
    return len(ids)


def housekeeping(now: datetime | None = None) -> tuple[int, int]:
    """Expire leases and fail jobs past the queue deadline. Returns (expired, no_host)."""
    now = now or timezone.now()
    return expire_leases(now), fail_past_queue_deadline(now)


def any_queued() -> bool:
    # Asked by every lease that finds nothing: plain SQL, as the host calls' other statements.
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT EXISTS (SELECT 1 FROM {Job._meta.db_table} "  # noqa: S608
                       "WHERE status = %s)", [JobStatus.QUEUED])
        return bool(cursor.fetchone()[0])


def housekeeping_due(now: datetime) -> bool:
    """At most once a second across the site (the cache decides); the periodic task always runs,
    so while the cache is unreachable this says no rather than failing the lease."""
    try:
        return cache.add(f"benchmarks:housekeeping:{int(now.timestamp())}", 1, timeout=5)
    except CACHE_ERRORS as exc:
        warn("housekeeping left to the periodic task", exc)
        return False
