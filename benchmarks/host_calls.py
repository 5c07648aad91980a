"""The host's job calls (lease, complete, complete several) as the host sees them: the answers'
shapes and the well-formed request bodies, for whatever serves them.

Two things serve these calls: the DRF views (benchmarks/api.py), which validate every body with
their serializers and answer every mistake, and under gunicorn the fast path in front of
Django's middleware (benchmarks/host_wsgi.py), which answers only the requests that the
`*_options` functions below read as well-formed and hands every other one to the views. So these
functions accept a subset of what the serializers accept, read it the same way, and answer None
for anything else: a request either path serves gets the same answer. No DRF here, as in
benchmarks/heartbeat.py.
"""

from __future__ import annotations

import json
import math
import re
import uuid
from dataclasses import dataclass

from accounts import credentials
from benchmarks import jobs, policy
from benchmarks.models import Job

MAX_RESULT_BYTES = 1_000_000  # a completion's `result`, as JSON


def job_for_host(job: Job) -> dict:
    """A job as the host that runs it receives it (lease, and `next` after a completion)."""
    return {
        "id": str(job.id),
        "status": job.status,  # "running" when the lease asked to start it
        "model": job.model_id,
        "messages": job.request_json.get("messages", []),
        "max_tokens": job.max_tokens,
        "attempt": job.attempts,
        "lease_expires_at": job.lease_expires_at,
    }


def job_state(job: Job) -> dict:
    """A job's state after a host call changed it (start, complete, fail)."""
    return {
        "id": str(job.id),
        "status": job.status,
        "started_at": job.started_at,
        "settled_at": job.settled_at,
        "lease_expires_at": job.lease_expires_at,
        "failure_reason": job.failure_reason or None,
    }


def job_error(exc: jobs.JobError) -> tuple[int, dict]:
    """The status and body a refused job call answers."""
    if isinstance(exc, jobs.NotYourJob):
        return 404, {"detail": "Not found."}
    if isinstance(exc, jobs.JobConflict):
        return 409, {"detail": str(exc)}
    return 400, {"detail": str(exc)}


def completed(job: Job, following: Job | None, lease_next: bool) -> dict:
    """The answer to /complete: the job's state, and with lease_next the next job or None."""
    answer = job_state(job)
    if lease_next:
        answer["next"] = None if following is None else job_for_host(following)
    return answer


def completed_many(job_ids: list, settled: list[Job | jobs.JobError], following: list[Job],
                   lease_next: bool) -> dict:
    """The answer to POST /v1/jobs/complete: each report's state, or its error in its place
    (the status /complete would have answered), and with lease_next the next jobs."""
    answer: dict = {"jobs": [job_state(item) if isinstance(item, Job) else _item_error(job_id, item)
                             for job_id, item in zip(job_ids, settled, strict=True)]}
    if lease_next:
        answer["next"] = [job_for_host(job) for job in following]
    return answer


def _item_error(job_id, exc: jobs.JobError) -> dict:
    status, body = job_error(exc)
    return {"id": str(job_id), "error": {"status": status, "detail": body["detail"]}}


def lease_limit_key(token: str) -> str:
    """The key the lease's rate limit counts a host's calls under: its token's digest, which
    (unlike the host's id) is known before the database says whose token it is, so the fast
    path counts the call and checks the caller's address in one cache round trip before any
    database work. Only the token's holder can spend it."""
    return credentials.digest(token)


def lease_limited_detail() -> str:
    return (f"Too many lease calls from this host: at most {policy.value('NETWORK_LEASE_LIMIT')} "
            f"per {policy.value('NETWORK_LEASE_WINDOW_S')} s.")


# What the URL's <uuid:job_id> accepts (Django's UUID converter).
JOB_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


@dataclass(frozen=True)
class Completion:
    figures: jobs.Figures
    result: object
    lease_next: bool
    wait_s: float


@dataclass(frozen=True)
class LeaseOptions:
    start: bool
    wait_s: float


def lease_options(data: object) -> LeaseOptions | None:
    """A lease body (already parsed JSON; {} for a bare POST) as LeaseSerializer reads it."""
    if not isinstance(data, dict):
        return LeaseOptions(False, 0.0)  # the view reads anything but an object as {}
    start, wait_s = data.get("start", False), _wait_s(data)
    if not isinstance(start, bool) or wait_s is None:
        return None
    return LeaseOptions(start, wait_s)


def completion_options(data: object) -> Completion | None:
    """A /complete body as CompleteSerializer reads it."""
    if not isinstance(data, dict):
        return None
    figures, lease_next, wait_s = _figures(data), data.get("lease_next", False), _wait_s(data)
    if figures is None or not isinstance(lease_next, bool) or wait_s is None:
        return None
    result = data.get("result")
    if not _small_enough(result):
        return None
    return Completion(figures, result, lease_next, wait_s)


def completions_options(data: object) -> tuple[list[tuple[uuid.UUID, jobs.Figures, object]],
                                               bool] | None:
    """A POST /v1/jobs/complete body as CompleteManySerializer reads it: (reports, lease_next)."""
    if not isinstance(data, dict):
        return None
    items, lease_next = data.get("jobs"), data.get("lease_next", False)
    if (not isinstance(items, list) or not items or not isinstance(lease_next, bool)
            or len(items) > policy.DEFAULTS["NETWORK_MAX_SLOTS"]):
        return None
    reports = []
    for item in items:
        if not isinstance(item, dict):
            return None
        job_id, figures, result = item.get("id"), _figures(item), item.get("result")
        if (not isinstance(job_id, str) or not JOB_ID.fullmatch(job_id) or figures is None
                or not _small_enough(result)):
            return None
        reports.append((uuid.UUID(job_id), figures, result))
    return reports, lease_next


def _figures(data: dict) -> jobs.Figures | None:
    if not {"ttft_ms", "completion_tokens", "elapsed_ms"} <= data.keys():
        return None
    ttft_ms, tokens, elapsed_ms = data["ttft_ms"], data["completion_tokens"], data["elapsed_ms"]
    if ttft_ms is not None and not _number(ttft_ms, 0.0):
        return None
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
        return None
    if not _number(elapsed_ms, 0.0):
        return None
    return jobs.Figures(ttft_ms=None if ttft_ms is None else float(ttft_ms),
                        completion_tokens=tokens, elapsed_ms=float(elapsed_ms))


def _wait_s(data: dict) -> float | None:
    wait_s = data.get("wait_s", 0.0)
    most = policy.DEFAULTS["NETWORK_LEASE_WAIT_MAX_S"]  # the serializers' bound
    if not _number(wait_s, 0.0, most):
        return None
    return min(float(wait_s), policy.value("NETWORK_LEASE_WAIT_MAX_S"))


def _number(value: object, low: float, high: float = math.inf) -> bool:
    """A finite JSON number (never a boolean) within [low, high]."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        number = float(value)
    except OverflowError:  # an integer too large for a float
        return False
    return math.isfinite(number) and low <= number <= high


def _small_enough(result: object) -> bool:
    return result is None or len(json.dumps(result)) <= MAX_RESULT_BYTES
