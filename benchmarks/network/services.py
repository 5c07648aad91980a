"""One service per call of the network's API: the views parse and shape, these do the work.

    submit     record the job and queue an assignment pass (run by a Celery worker)
    submit_many  several jobs of one team, all or none, and one pass for them
    heartbeat  record the host's state; nothing else (no assignment pass inside the request);
               steady_heartbeat is its one-statement form for a host that is not over its limit
    lease      the host's next assigned job, optionally started; with `wait_s`, waits up to
               that long for one (woken when a pass assigns it: benchmarks/network/wakeup.py)
    start      leased -> running
    complete   record the figures, queue the EWMA fold and a pass; optionally lease the next job
    complete_many  several completions of one host in one call, and as many next jobs
    fail       record the failure, queue the fold (reputation) and a pass

No request runs an assignment pass: a pass is a Celery task (`tasks.assign_queued_jobs`), at
most one in flight, each taking every queued job a free host can take. Under eager Celery (the
tests) it runs inside the call that queues it, as passes did before.

Imports go one way: services -> tasks -> routing and jobs (and hosts -> jobs) -> models; routing
and jobs do not import each other, and only the API views import this module.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from django.db import connection
from django.utils import timezone

from benchmarks import policy, tasks
from benchmarks.models import Host, Job
from benchmarks.network import hosts, jobs, wakeup


def submit(team, model_id: str, messages: list, max_tokens: int) -> Job:
    return submit_many(team, [jobs.Submission(model_id, messages, max_tokens)])[0]


def submit_many(team, items: list[jobs.Submission]) -> list[Job]:
    """All the jobs or none (jobs.submit_many), then one pass for them all."""
    created = jobs.submit_many(team, items)  # committed on return
    tasks.request_pass()
    return created


# How a lease waits for a job: (host id, seconds, one look, the most calls waiting at once) ->
# what a look found, or None. wait_in_thread parks the calling thread; an event-loop server
# passes one that notes the wait and returns None at once, then waits on its loop
# (benchmarks/network/host_protocol.py, LeaseWait).
Wait = Callable[[int, float, Callable[[], Job | None], int], Job | None]


def wait_in_thread(host_id: int, seconds: float, look: Callable[[], Job | None],
                   most: int) -> Job | None:
    """wakeup.wait, holding no database connection between looks: under thread workers each
    waiting host holds a thread, and PostgreSQL's connections (or the pool's,
    DB_POOL_MAX_SIZE) are far fewer than threads."""
    def look_then_release() -> Job | None:
        found = look()
        if found is None:
            _release_connection()
        return found

    _release_connection()
    return wakeup.wait(host_id, seconds, look_then_release, most)


def heartbeat(token: str, models: list[str], hardware: dict, slots: int) -> hosts.Heartbeat | None:
    """None when the token is not a current host token (401)."""
    return hosts.heartbeat(token, models, hardware, slots)


def steady_heartbeat(token: str, models: list[str], hardware: dict, slots: int,
                     not_within_s: float) -> hosts.Heartbeat | None:
    """A steady host's heartbeat in one statement, or None: take the full path."""
    return hosts.steady_heartbeat(token, models, hardware, slots, not_within_s)


def lease(host: Host, start: bool = False, wait_s: float = 0.0,
          now: datetime | None = None, after: Job | None = None,
          wait: Wait = wait_in_thread) -> Job | None:
    """The oldest job a pass already gave this host (optionally started), or None.

    Without one: the clocks are enforced (at most once a second across the site), a pass is
    queued when jobs are waiting, and with `wait_s` the call waits up to that long for a pass
    to give this host a job; it holds no lock and runs no query while it waits, only when a
    pass announces work for this host (or every wakeup.POLL_S while Redis cannot announce).
    `after`: the completed job this lease follows (lease_next), recorded on it. `wait`: how
    it waits (Wait)."""
    now = now or timezone.now()
    if host.suspended:
        return None
    job = jobs.lease(host, now, start=start, after=after)
    if job is not None:
        return job
    if jobs.housekeeping_due(now):
        jobs.housekeeping(now)
    if jobs.any_queued() and tasks.request_pass():
        job = jobs.lease(host, start=start, after=after)  # the pass ran here (eager Celery)
    if job is None and wait_s > 0:
        job = wait(host.pk, wait_s, lambda: jobs.lease(host, start=start, after=after),
                   policy.value("NETWORK_WAITING_LEASES_PER_PROCESS"))
    return job


def _release_connection() -> None:
    if not connection.in_atomic_block:
        connection.close()


def start(host: Host, job_id) -> Job:
    return jobs.start(host, job_id)


def complete(host: Host, job_id, figures: jobs.Figures, result, lease_next: bool = False,
             wait_s: float = 0.0, wait: Wait = wait_in_thread) -> tuple[Job, Job | None]:
    """The completed job and, with `lease_next`, the host's next job already started (or None,
    after waiting up to `wait_s` for one): a busy host then needs one call per job. A
    repeated completion (its answer lost on the way) answers the next job the first one
    handed out, if the host still runs it, and never takes another."""
    job, first_time = jobs.complete(host, job_id, figures, result)
    tasks.queue_fold()
    if lease_next:
        return job, _next_for(host, job, first_time, wait_s, wait)
    if jobs.any_queued():
        tasks.request_pass()  # a slot came free
    return job, None


def _next_for(host: Host, completed: Job, first_time: bool, wait_s: float = 0.0,
              wait: Wait = wait_in_thread) -> Job | None:
    if not first_time:
        return jobs.handed_next(host, completed)
    # finding none queues a pass
    return lease(host, start=True, wait_s=wait_s, after=completed, wait=wait)


def complete_many(host: Host, reports: list[tuple[object, jobs.Figures, object]],
                  lease_next: bool = False) -> tuple[list[Job | jobs.JobError], list[Job]]:
    """Several completions of one host in one call (a host with several slots): each is
    recorded in its own transaction exactly as `complete` records it, so one refused report
    never undoes another. Returns, in the order given, each completed job or the error that
    refused it, and with `lease_next` up to one next job (started) per job completed here,
    without waiting (for a repeated report, the one its first call handed out, as `complete`
    answers). One fold and at most one pass are queued for the whole call."""
    settled: list[Job | jobs.JobError] = []
    completed: list[tuple[Job, bool]] = []  # each completed job, and whether this call did it
    for job_id, figures, result in reports:
        try:
            job, first_time = jobs.complete(host, job_id, figures, result)
        except jobs.JobError as exc:
            settled.append(exc)
            continue
        settled.append(job)
        completed.append((job, first_time))
    if completed:
        tasks.queue_fold()
    following: list[Job] = []
    if lease_next:
        # Repeated reports first (they take nothing new), then one lease per new completion
        # until the host's queue is empty.
        for job, first_time in sorted(completed, key=lambda pair: pair[1]):
            found = _next_for(host, job, first_time)
            if found is not None:
                following.append(found)
            elif first_time:
                break
    elif completed and jobs.any_queued():
        tasks.request_pass()  # slots came free
    return settled, following


def fail(host: Host, job_id, reason: str) -> Job:
    job = jobs.fail(host, job_id, reason)
    tasks.queue_fold()
    if jobs.any_queued():
        tasks.request_pass()
    return job
