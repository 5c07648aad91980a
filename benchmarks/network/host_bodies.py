"""What a host call's body must hold, read as the API's serializers read it (a JSON number,
never a string or a boolean): the heartbeat's fields (`heartbeat_fields`, which raises ValueError
with the caller's message) and the well-formed job calls' options (`lease_options`,
`completion_options`, `completions_options`: None for anything the fast path leaves to the DRF
views). benchmarks/network/host_protocol.py answers with them.
"""

from __future__ import annotations

import json
import math
import re
import uuid
from dataclasses import dataclass

from benchmarks import policy
from benchmarks.network import hosts, jobs
from common import parsers

MAX_RESULT_BYTES = 1_000_000  # a completion's `result`, as JSON


def heartbeat_fields(raw: bytes) -> dict:
    """The heartbeat's fields, checked as strictly as the API's serializers check numbers (a
    JSON number, never a string or a boolean); raises ValueError with a message for the caller."""
    data = parsers.loads(raw or b"null")  # the API parser's rules; UnacceptableJSON is a ValueError
    if not isinstance(data, dict):
        raise ValueError("expected a JSON object")
    models = data.get("models")
    if not isinstance(models, list) or len(models) > 64 or not all(
            isinstance(m, str) and 0 < len(m.strip()) <= 64 for m in models):
        raise ValueError("models: a list of at most 64 catalog ids")
    hardware = data.get("hardware", {})
    if not isinstance(hardware, dict):
        raise ValueError("hardware: expected an object")
    checked = {}
    for name, kind in hosts.HARDWARE_FIELDS.items():
        if name not in hardware:
            continue
        value = hardware[name]
        if kind is str and not (isinstance(value, str) and len(value.strip()) <= 100):
            raise ValueError(f"hardware.{name}: at most 100 characters")
        if kind is int and not _whole(value, 0, 2**31 - 1):
            raise ValueError(f"hardware.{name}: a whole number from 0 to {2**31 - 1}")
        checked[name] = value.strip() if kind is str else int(value)
    slots = data.get("slots", 1)
    limit = policy.value("NETWORK_MAX_SLOTS")
    if not _whole(slots, 1, limit):
        raise ValueError(f"slots: a whole number from 1 to {limit}")
    return {"models": [m.strip() for m in models], "hardware": checked, "slots": int(slots)}


def _whole(value, low: int, high: int) -> bool:
    """A JSON number that is whole and within [low, high] (never a string or a boolean)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return (isinstance(value, int) or value.is_integer()) and low <= value <= high



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
