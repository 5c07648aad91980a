"""A service-level objective per scan, attainment and goodput per level, and the capacity search
(issue 22). Not graded: nothing here feeds scoring.

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

The capacity search (``--find-capacity``): from the highest plan level that met the SLO,
double the concurrency until a level misses, then bisect between the last that met and the
first that missed, at most ``max_levels`` extra levels and ``MAX_SEARCH_REQUESTS`` requests.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scans.grader.measurement import LevelResult, RequestRecord
from scans.grader.stats import percentile

__all__ = [
    "DEFAULT_ATTAINMENT",
    "DEFAULT_SEARCH_LEVELS",
    "MAX_SEARCH_LEVELS",
    "MAX_SEARCH_REQUESTS",
    "OBJECTIVES",
    "Slo",
    "SloError",
    "capacity",
    "describe_capacity",
    "describe_slo",
    "evaluate_level",
    "goodput_text",
    "next_search_level",
    "parse_slo",
    "slo_from_dict",
    "search_requests",
]

DEFAULT_ATTAINMENT = 0.95
#: The per-request objectives, then the level-wide one.
REQUEST_OBJECTIVES = ("ttft_p95_ms", "itl_p95_ms", "e2e_p95_ms")
OBJECTIVES = (*REQUEST_OBJECTIVES, "error_rate")
DEFAULT_SEARCH_LEVELS = 8
MAX_SEARCH_LEVELS = 16
#: All the searched levels together send at most this many requests.
MAX_SEARCH_REQUESTS = 20_000
MIN_SEARCH_REQUESTS = 20


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

def _e2e_ms(record: RequestRecord) -> float | None:
    """End-to-end as ``headline.end_to_end_ms`` has it (body written to [DONE], else the end
    of the response); not imported from there, which imports the plan, which imports this."""
    end = record.done_at if record.done_at is not None else record.ended_at
    if end is None or record.body_written_at is None:
        return None
    return (end - record.body_written_at) * 1000.0


def _since_scheduled_ms(record: RequestRecord, moment: float | None) -> float | None:
    return None if moment is None else (moment - record.scheduled_at) * 1000.0


def _good(record: RequestRecord, slo: Slo, from_schedule: bool = False) -> bool:
    if not record.succeeded:
        return False
    ttft = slo.target("ttft_p95_ms")
    first = (_since_scheduled_ms(record, record.first_output_at) if from_schedule
             else record.ttft_ms)
    if ttft is not None and (first is None or first > ttft):
        return False
    itl = slo.target("itl_p95_ms")
    if itl is not None:
        gap = percentile(record.gaps_ms(), 95)
        if gap is not None and gap > itl:
            return False
    e2e = slo.target("e2e_p95_ms")
    if e2e is not None:
        took = (_since_scheduled_ms(record, record.done_at if record.done_at is not None
                                    else record.ended_at) if from_schedule else _e2e_ms(record))
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
        return round(count / duration, 3) if duration > 0 else None

    return {
        "good": len(good),
        "requests": len(requests),
        "attainment": None if attainment is None else round(attainment, 4),
        "error_rate": None if error_rate is None else round(error_rate, 4),
        "met": met,
        "goodput_requests_per_s": per_s(len(good)),
        "goodput_output_per_s": per_s(units),
        "goodput_unit": f"{basis}/s",
        **({"measured_from": "schedule"} if from_schedule else {}),
    }


# -- the capacity search -------------------------------------------------------------------------

def search_requests(concurrency: int) -> int:
    """Requests a searched level sends: enough for a p95 (20) and two rounds of its streams."""
    return max(MIN_SEARCH_REQUESTS, 2 * concurrency)


def _bounds(tried: Mapping[int, bool]) -> tuple[int | None, int | None]:
    """(the highest level that met, the lowest level above it that missed)."""
    met = [c for c, ok in tried.items() if ok]
    if not met:
        return None, None
    low = max(met)
    above = [c for c, ok in tried.items() if not ok and c > low]
    return low, (min(above) if above else None)


def next_search_level(tried: Mapping[int, bool], max_level: int) -> int | None:
    """The next concurrency to try given the levels tried so far (concurrency → met), or None
    when the search is done (no level met, the boundary is found, or `max_level` was met)."""
    low, high = _bounds(tried)
    if low is None:
        return None
    if high is None:
        nxt = min(low * 2, max_level)
        return None if nxt <= low else nxt
    if high - low <= 1:
        return None
    return (low + high) // 2


def capacity(plan_levels: Sequence[Mapping[str, Any]], searched: Sequence[Mapping[str, Any]],
             slo: Slo, *, exhausted: bool) -> dict:
    """report.json's ``capacity``: the largest concurrency that met the SLO and its figures,
    or null and the reason; ``bound_reached`` when the highest level tried met it and the
    search stopped at its bound (the true capacity may be higher)."""
    every = [*plan_levels, *searched]
    tried = {int(lv["concurrency"]): bool((lv.get("slo") or {}).get("met")) for lv in every}
    low, high = _bounds(tried)
    result: dict[str, Any] = {"slo": slo.public_dict(), "levels_tried": sorted(tried),
                              "searched_levels": len(searched)}
    if low is None:
        return {**result, "concurrency": None, "requests_per_s": None,
                "output_tokens_per_s": None, "output_unit": None, "attainment": None,
                "bound_reached": False,
                "reason": "no level met the SLO (not even concurrency "
                          f"{min(tried) if tried else 1})"}
    best = next(lv for lv in every if int(lv["concurrency"]) == low)
    figures = best.get("slo") or {}
    reached = high is None
    return {**result, "concurrency": low,
            "requests_per_s": figures.get("goodput_requests_per_s"),
            "output_tokens_per_s": figures.get("goodput_output_per_s"),
            "output_unit": figures.get("goodput_unit"),
            "attainment": figures.get("attainment"),
            "bound_reached": reached,
            "reason": (("met at the highest level tried: the search stopped at its bound, "
                        "the capacity may be higher") if reached and exhausted else
                       "met at the highest level tried (no search ran above it)" if reached
                       else f"concurrency {high} missed the SLO")}


# -- words -------------------------------------------------------------------------------------

def _num(value: Any) -> float | None:
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None


def describe_slo(slo: Mapping[str, Any]) -> str:
    """``plan.slo`` in words: "TTFT ≤ 80.0 ms, error rate ≤ 1.0 %, for 95.0 % of requests"."""
    from scans.grader import formatting as fmt

    names = {"ttft_p95_ms": "TTFT", "itl_p95_ms": "inter-chunk p95",
             "e2e_p95_ms": "end-to-end"}
    parts = [f"{label} ≤ {fmt.ms(_num(slo.get(key)))}" for key, label in names.items()
             if _num(slo.get(key)) is not None]
    if _num(slo.get("error_rate")) is not None:
        parts.append(f"error rate ≤ {fmt.percent(_num(slo.get('error_rate')))}")
    return f"{', '.join(parts)}, for {fmt.percent(_num(slo.get('attainment')))} of requests"


def goodput_text(rps: Any, out: Any, unit: Any) -> str:
    from scans.grader import formatting as fmt

    return (f"{fmt.rate(_num(rps), 'requests/s')}, "
            f"{fmt.rate(_num(out), str(unit or 'tokens/s'))}")


def describe_capacity(found: Mapping[str, Any]) -> str:
    """report.json's ``capacity`` in words (the CLI's line and report.html's)."""
    tried = "/".join(str(c) for c in found.get("levels_tried") or [])
    if found.get("concurrency") is None:
        return f"none, {found.get('reason')}; tried {tried}"
    flag = (" (met at the highest level tried: the search stopped at its bound, the capacity "
            "may be higher)" if found.get("bound_reached") else "")
    return (f"{found['concurrency']} concurrent requests within the SLO{flag}; goodput "
            + goodput_text(found.get("requests_per_s"), found.get("output_tokens_per_s"),
                           found.get("output_unit"))
            + f"; tried {tried}")
