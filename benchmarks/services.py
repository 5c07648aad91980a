"""One service per call of the network's API: the views parse and shape, these do the work.

    submit     queue a job, then a pass (non-blocking) so an idle best host gets it at once
    heartbeat  record the host's state; nothing else (no assignment pass inside the request)
    lease      the host's next assigned job (after the clocks and a pass if it has none),
               optionally started
    start      leased -> running
    complete   record the figures, queue the EWMA fold; optionally lease the next job
    fail       record the failure, queue the fold (reputation)

Imports go one way: services -> tasks -> routing and jobs (and hosts -> jobs) -> models; routing
and jobs do not import each other, and only the API views import this module.
"""

from __future__ import annotations

from datetime import datetime

from django.utils import timezone

from benchmarks import hosts, jobs, routing, tasks
from benchmarks.models import Host, Job


def submit(team, model_id: str, messages: list, max_tokens: int) -> Job:
    job = jobs.submit(team, model_id, messages, max_tokens)
    routing.assignment_pass()
    return job


def heartbeat(token: str, models: list[str], hardware: dict, slots: int) -> hosts.Heartbeat | None:
    """None when the token is not a current host token (401)."""
    return hosts.heartbeat(token, models, hardware, slots)


def lease(host: Host, start: bool = False, now: datetime | None = None) -> Job | None:
    """A job the last pass already gave this host is handed out at once (no pass: a busy host
    asking for its next job costs one statement); otherwise the clocks are enforced (at most
    once a second across the site) and a pass runs first. A pass already running is not
    waited for: with sync web workers a wait holds a whole worker, and the host asks again
    after its poll interval (or with its next completion)."""
    now = now or timezone.now()
    if host.suspended:
        return None
    job = jobs.lease(host, now, start=start)
    if job is None:
        if jobs.housekeeping_due(now):
            jobs.housekeeping(now)
        # Asked again only when the pass assigned something (an idle poll is the commonest
        # call of a quiet network: this keeps it to the lease query and one EXISTS).
        if routing.assignment_pass(now):
            job = jobs.lease(host, now, start=start)
    return job


def start(host: Host, job_id) -> Job:
    return jobs.start(host, job_id)


def complete(host: Host, job_id, figures: jobs.Figures, result,
             lease_next: bool = False) -> tuple[Job, Job | None]:
    """The completed job and, with `lease_next`, the host's next job already started (or None):
    a busy host then needs one call per job instead of three."""
    job = jobs.complete(host, job_id, figures, result)
    tasks.queue_fold(host.pk)
    following = lease(host, start=True) if lease_next else None
    return job, following


def fail(host: Host, job_id, reason: str) -> Job:
    job = jobs.fail(host, job_id, reason)
    tasks.queue_fold(host.pk)
    return job
