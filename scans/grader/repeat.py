"""`tokvera scan --repeat N`: the same scan N times back to back, summed up as repeat.json.

Each run is an ordinary scan with its own report (run-1/, run-2/, ...). This module reads the
runs' report.json dicts only: the headline figures of each run, their median over the runs
with a 95 % confidence interval (a percentile bootstrap of the median, seeded; DECISIONS.md
says why), the spread of grades, and the median run, whose grade and verdict the command
reports and exits by. No run's grade changes: the summary is beside the reports, never in
them. docs/requests.md documents repeat.json.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scans.grader import formatting as fmt
from scans.grader.figures import percentile, rounded
from scans.grader.report_text import is_down
from scans.grader.scoring import GRADES

__all__ = [
    "CONFIDENCE",
    "FIGURES",
    "MAX_REPEAT",
    "REPEAT_FILE",
    "RepeatError",
    "bootstrap_interval",
    "essentials",
    "grade_label",
    "median_run",
    "parse_repeat",
    "run_dir",
    "spread_text",
    "summarise",
    "summary_texts",
]

REPEAT_FILE = "repeat.json"
#: Enough runs to see a spread, few enough that a repeat stays a command, not a campaign.
MAX_REPEAT = 20
CONFIDENCE = 0.95
#: Bootstrap resamples per figure, and the seed: the same runs give the same interval.
RESAMPLES = 10_000
SEED = 0
#: Below this many runs the percentile interval of the median is the runs' whole range.
RANGE_ONLY_BELOW = 6
NO_GRADE = "no grade"
DOWN = "down"
#: Grade labels from best to worst: a run without a letter ranks below F, a down one last.
LABELS = (*GRADES, NO_GRADE, DOWN)


class RepeatError(ValueError):
    """A --repeat value that is not a number of runs."""


def parse_repeat(text: str) -> int:
    try:
        runs = int(text)
    except ValueError:
        runs = 0
    if not 1 <= runs <= MAX_REPEAT:
        raise RepeatError(f"--repeat {text!r}: expected a whole number of runs from 1 to "
                          f"{MAX_REPEAT}")
    return runs


def run_dir(run: int) -> str:
    """The subdirectory of --out that holds run `run` (1-based)."""
    return f"run-{run}"


# -- the figures of one run ---------------------------------------------------------------------

def _level_1(report: Mapping[str, Any]) -> Mapping[str, Any]:
    return next((lv for lv in report.get("levels") or [] if lv.get("concurrency") == 1), {})


def _ttft(key: str) -> Callable[[Mapping[str, Any]], tuple[float | None, str]]:
    def read(report: Mapping[str, Any]) -> tuple[float | None, str]:
        return (_level_1(report).get("ttft_ms") or {}).get(key), "ms"
    return read


def _generation_rate(report: Mapping[str, Any]) -> tuple[float | None, str]:
    rate = _level_1(report).get("generation_rate") or {}
    return rate.get("median"), rate.get("unit") or "tokens/s"


def _error_rate(report: Mapping[str, Any]) -> tuple[float | None, str]:
    checks = {check.get("id"): check for check in report.get("checks") or []}
    return (checks.get("error_rate") or {}).get("value"), "share"


def _points(report: Mapping[str, Any]) -> tuple[float | None, str]:
    # Down is a state, not a grade: its recorded F's points are no quality figure.
    if is_down(report):
        return None, "points"
    return (report.get("score") or {}).get("points"), "points"


@dataclass(frozen=True)
class Figure:
    key: str    # repeat.json's name
    label: str  # the CLI's
    read: Callable[[Mapping[str, Any]], tuple[float | None, str]]  # value and unit of a report


#: The headline figures summed up over runs, in the order they are printed.
FIGURES = (
    Figure("ttft_p50_ms_at_concurrency_1", "TTFT p50 at concurrency 1", _ttft("p50")),
    Figure("ttft_p95_ms_at_concurrency_1", "TTFT p95 at concurrency 1", _ttft("p95")),
    Figure("generation_rate_at_concurrency_1", "generation rate at concurrency 1",
           _generation_rate),
    Figure("error_rate", "error rate", _error_rate),
    Figure("points", "points", _points),
)


#: What the summary reads of a level: no per-request timelines.
_LEVEL_KEYS = ("concurrency", "requests", "succeeded", "failed", "ttft_ms", "generation_rate")


def essentials(report: Mapping[str, Any]) -> dict:
    """The part of a run's report the summary reads, so that N runs do not keep N reports'
    per-request timelines in memory (the reports themselves are on disk)."""
    return {
        "score": report.get("score") or {},
        "checks": [{"id": c.get("id"), "value": c.get("value")}
                   for c in report.get("checks") or []],
        "preflight": {"stopped": (report.get("preflight") or {}).get("stopped")},
        "levels": [{key: level.get(key) for key in _LEVEL_KEYS}
                   for level in report.get("levels") or []],
    }


# -- over the runs ------------------------------------------------------------------------------

def _median(values: Sequence[float]) -> float | None:
    # The project's one percentile (nearest rank): with an even number of runs, the lower of
    # the two middle values, a value some run measured.
    return percentile(values, 50)


def bootstrap_interval(values: Sequence[float], confidence: float = CONFIDENCE,
                       resamples: int = RESAMPLES, seed: int = SEED) -> tuple[float, float] | None:
    """The percentile-bootstrap interval of the median of `values`: the median of `resamples`
    resamples (with replacement, seeded), cut at (1 - confidence) / 2 on each side. None with
    fewer than two values."""
    if len(values) < 2:
        return None
    rng = random.Random(seed)
    medians: list[float] = []
    for _ in range(resamples):
        median = _median(rng.choices(values, k=len(values)))
        assert median is not None  # a resample is never empty
        medians.append(median)
    tail = (1.0 - confidence) / 2.0 * 100.0
    low, high = percentile(medians, tail), percentile(medians, 100.0 - tail)
    assert low is not None and high is not None
    return low, high


def _figure_summary(figure: Figure, reports: Sequence[Mapping[str, Any]]) -> dict:
    read = [figure.read(report) for report in reports]
    units = {unit for value, unit in read if value is not None}
    values = [float(value) for value, _ in read if value is not None]
    entry: dict[str, Any] = {
        "label": figure.label,
        "unit": next(iter(units)) if len(units) == 1 else None,
        "values": [None if value is None else rounded(value) for value, _ in read],
        "runs": len(values),
        "median": None, "ci_low": None, "ci_high": None, "reason": None,
    }
    if len(units) > 1:  # chunks/s in one run, tokens/s in another: not one figure
        entry["reason"] = f"the runs measured it in different units ({', '.join(sorted(units))})"
        return entry
    entry["median"] = rounded(_median(values))
    interval = bootstrap_interval(values)
    if interval is not None:
        entry["ci_low"], entry["ci_high"] = rounded(interval[0]), rounded(interval[1])
    elif values:
        entry["reason"] = "one run had it: no interval"
    else:
        entry["reason"] = "no run had it"
    return entry


def grade_label(report: Mapping[str, Any]) -> str:
    """A run's grade as the CLI says it: its letter, "no grade", or "down" (report.json still
    records F for a down endpoint; it is not presented as a quality grade)."""
    if is_down(report):
        return DOWN
    grade = (report.get("score") or {}).get("grade")
    return grade if grade in GRADES else NO_GRADE


def median_run(reports: Sequence[Mapping[str, Any]]) -> int:
    """The index of the median run: the runs ranked best to worst (grade, then points), the
    middle one; with an even number, the worse of the two middle ones, so that a floor is
    never passed on a tie."""
    def rank(i: int) -> tuple[int, float]:
        points = (reports[i].get("score") or {}).get("points")
        return LABELS.index(grade_label(reports[i])), -(points if points is not None else -1.0)

    ranked = sorted(range(len(reports)), key=rank)
    return ranked[len(ranked) // 2]


def _spread(reports: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    counts = Counter(grade_label(report) for report in reports)
    return {label: counts[label] for label in LABELS if counts[label]}


def spread_text(spread: Mapping[str, int]) -> str:
    """{"A": 4, "B": 1} → "A ×4, B ×1"."""
    return ", ".join(f"{label} ×{count}" for label, count in spread.items())


def _range_note(runs: int) -> str | None:
    if runs >= RANGE_ONLY_BELOW:
        return None
    # The range of N runs misses the true median only when all N fall on one side of it.
    coverage = 1.0 - 2.0 ** (1 - runs)
    return (f"with {runs} runs the interval is the runs' range, which holds the true median "
            f"{fmt.percent(coverage).replace('.0 %', ' %')} of the time ({RANGE_ONLY_BELOW} "
            "runs or more for 95 %)")


def summarise(reports: Sequence[Mapping[str, Any]]) -> dict:
    """repeat.json's dict for `reports`, run 1 first."""
    middle = median_run(reports)
    spread = _spread(reports)
    runs = len(reports)
    return {
        "runs": runs,
        "confidence": CONFIDENCE,
        "ci_method": {
            "name": "bootstrap_percentile_of_median",
            "resamples": RESAMPLES,
            "seed": SEED,
            "note": _range_note(runs),
        },
        "figures": {figure.key: _figure_summary(figure, reports) for figure in FIGURES},
        "grades": spread,
        "grade_spread": spread_text(spread),
        "median_run": {"run": middle + 1, "dir": run_dir(middle + 1),
                       "grade": (reports[middle].get("score") or {}).get("grade"),
                       "label": grade_label(reports[middle]),
                       "points": (reports[middle].get("score") or {}).get("points")},
        "per_run": [{"run": i + 1, "dir": run_dir(i + 1),
                     "grade": (report.get("score") or {}).get("grade"),
                     "label": grade_label(report),
                     "points": (report.get("score") or {}).get("points")}
                    for i, report in enumerate(reports)],
    }


# -- in words -----------------------------------------------------------------------------------

def _shown(value: float | None, unit: str | None, with_unit: bool = True) -> str:
    if value is None:
        return fmt.MISSING
    if unit == "ms":
        return fmt.ms(value) if with_unit else fmt.number(value, "ms")
    if unit == "share":
        return fmt.percent(value) if with_unit else fmt.number(value, "share")
    if unit == "points":
        return fmt.number(value, "rate")
    shown = fmt.number(value, "rate")
    return f"{shown} {unit}" if with_unit and unit else shown


def summary_texts(summary: Mapping[str, Any]) -> list[str]:
    """The summary for the CLI, one sentence a figure (the caller wraps them): "TTFT p50 at
    concurrency 1: 5.2 ms (5.0–5.4 ms)", under a line that says what the figures are."""
    texts = [f"over {summary['runs']} runs, the median and its 95 % confidence interval:"]
    for entry in summary["figures"].values():
        unit = entry["unit"]
        if entry["median"] is None:
            texts.append(f"{entry['label']}: {fmt.MISSING} ({entry['reason']})")
            continue
        if entry["ci_low"] is None:
            texts.append(f"{entry['label']}: {_shown(entry['median'], unit)} "
                         f"({entry['reason']})")
            continue
        interval = (f"{_shown(entry['ci_low'], unit, with_unit=False)}–"
                    f"{_shown(entry['ci_high'], unit)}")
        texts.append(f"{entry['label']}: {_shown(entry['median'], unit)} ({interval})")
    if summary["ci_method"]["note"]:
        texts.append(f"note: {summary['ci_method']['note']}")
    return texts
