"""The scan's objective (``--slo``, the class ``Slo``), and each level's attainment and goodput
against it. Not graded: nothing here feeds scoring. (The search for the largest concurrency that
meets it is capacity.py; the SLO windows of the site's endpoints are another thing.)

A request is *good* when it succeeded and meets every per-request objective given:

* ``ttft_p95_ms``: its time to first token (as graded: the first output token) is at most the
  target;
* ``itl_p95_ms``: the p95 of its own inter-chunk gaps is at most the target (a stream with a
  single output chunk has no gap and meets it);
* ``e2e_p95_ms``: its end-to-end latency (body written to [DONE]) is at most the target.

The objectives are named after a p95 because a level meets the SLO when at least the
attainment target (95 % by default) of its requests are good: then the level's p95 of each
is within its target. Failures are misses. ``error_rate`` is a level-wide objective: the level's
share of failed requests must not exceed it. Goodput: good requests per second, and their
output (tokens when every good stream reported usage, else chunks) per second.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from scans.grader.figures import percentile, rounded
from scans.grader.measurement import LevelResult, RequestRecord, end_to_end_ms
from scans.grader.openloop import e2e_from_schedule_ms, ttft_from_schedule_ms

__all__ = [
    "DEFAULT_ATTAINMENT",
    "OBJECTIVES",
    "Slo",
    "SloError",
    "evaluate_level",
    "parse_slo",
    "slo_from_dict",
]

DEFAULT_ATTAINMENT = 0.95
#: The per-request objectives, then the level-wide one.
REQUEST_OBJECTIVES = ("ttft_p95_ms", "itl_p95_ms", "e2e_p95_ms")
OBJECTIVES = (*REQUEST_OBJECTIVES, "error_rate")


class SloError(ValueError):
    """A bad --slo or --attainment; the message is one line meant for the user."""


@dataclass(frozen=True)
class Slo:
    objectives: tuple[tuple[str, float], ...]
    attainment: float = DEFAULT_ATTAINMENT

    def target(self, name: str) -> float | None:
        return dict(self.objectives).get(name)

    def validate(self) -> Slo:
        if not self.objectives:
            raise SloError("--slo: give at least one objective (" + ", ".join(OBJECTIVES) + ")")
        for name, value in self.objectives:
            if name not in OBJECTIVES:
                raise SloError(f"--slo: unknown objective {name!r} (expected "
                               + ", ".join(OBJECTIVES) + ")")
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise SloError(f"--slo: {name} must be a positive number")
            if name == "error_rate" and value > 1:
                raise SloError("--slo: error_rate is a share, at most 1")
        names = [name for name, _ in self.objectives]
        if len(set(names)) != len(names):
            raise SloError("--slo: an objective is given twice")
        if not (isinstance(self.attainment, int | float) and math.isfinite(self.attainment)
                and 0 < self.attainment <= 1):
            raise SloError("--attainment must be a share in (0, 1], e.g. 0.95")
        return self

    def public_dict(self) -> dict:
        """As report.json records it (``plan.slo``, ``capacity.slo``)."""
        return {**dict(self.objectives), "attainment": self.attainment}


def slo_from_dict(data: Mapping[str, Any]) -> Slo:
    """report.json's ``plan.slo`` back into an Slo (validated)."""
    objectives = tuple((name, float(data[name])) for name in OBJECTIVES
                       if isinstance(data.get(name), int | float))
    attainment = data.get("attainment", DEFAULT_ATTAINMENT)
    return Slo(objectives, float(attainment)).validate()


def parse_slo(text: str, attainment: float = DEFAULT_ATTAINMENT) -> Slo:
    """``"ttft_p95_ms=500,error_rate=0.01"`` → Slo (validated); SloError with one line."""
    objectives = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        name, sep, value = part.partition("=")
        name = name.strip()
        if not sep:
            raise SloError(f"--slo {part!r}: expected name=value, e.g. ttft_p95_ms=500")
        if name not in OBJECTIVES:
            raise SloError(f"--slo: unknown objective {name!r} (expected "
                           + ", ".join(OBJECTIVES) + ")")
        try:
            number = float(value)
        except ValueError:
            raise SloError(f"--slo: {name}={value.strip()!r} is not a number") from None
        objectives.append((name, number))
    return Slo(tuple(objectives), attainment).validate()


# -- a level -------------------------------------------------------------------------------------

def _good(record: RequestRecord, slo: Slo, from_schedule: bool = False) -> bool:
    if not record.succeeded:
        return False
    ttft = slo.target("ttft_p95_ms")
    first = ttft_from_schedule_ms(record) if from_schedule else record.ttft_ms
    if ttft is not None and (first is None or first > ttft):
        return False
    itl = slo.target("itl_p95_ms")
    if itl is not None:
        gap = percentile(record.gaps_ms(), 95)
        if gap is not None and gap > itl:
            return False
    e2e = slo.target("e2e_p95_ms")
    if e2e is not None:
        took = e2e_from_schedule_ms(record) if from_schedule else end_to_end_ms(record)
        if took is None or took > e2e:
            return False
    return True


def evaluate_level(level: LevelResult, slo: Slo, *, from_schedule: bool = False) -> dict:
    """The level's ``slo`` entry in report.json. `from_schedule` (open-loop rate levels): TTFT
    and end-to-end are judged from each request's scheduled time, as its user waited."""
    requests = level.requests
    good = [r for r in requests if _good(r, slo, from_schedule)]
    failed = sum(1 for r in requests if not r.succeeded)
    attainment = len(good) / len(requests) if requests else None
    error_rate = failed / len(requests) if requests else None
    limit = slo.target("error_rate")
    met = (attainment is not None and attainment >= slo.attainment
           and (limit is None or (error_rate is not None and error_rate <= limit)))
    duration = level.duration_s
    tokens = bool(good) and all(r.reported_usage for r in good)
    units = (sum(r.completion_tokens or 0 for r in good) if tokens
             else sum(r.output_chunks for r in good))
    basis = "tokens" if tokens else "chunks"

    def per_s(count: int) -> float | None:
        return rounded(count / duration) if duration > 0 else None

    return {
        "good": len(good),
        "requests": len(requests),
        "attainment": rounded(attainment, 4),
        "error_rate": rounded(error_rate, 4),
        "met": met,
        "goodput_requests_per_s": per_s(len(good)),
        "goodput_output_per_s": per_s(units),
        "goodput_unit": f"{basis}/s",
        **({"measured_from": "schedule"} if from_schedule else {}),
    }

