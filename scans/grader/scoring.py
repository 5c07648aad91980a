"""Scoring: turns measured check values into statuses, pillar points, caps and a grade.

The rules (check ids, pillars, bounds, weights, bands, caps) are those of scoring version
0.9.0 in ../shared/spec/tokvera-scoring.txt; `markdown()` renders them as the tables that
docs/scoring.md embeds, and a test fails when the two differ.

Scoring knows nothing of HTTP or Django. It never measures: it grades the values it is given,
so a stored report can be re-graded from its numbers (`values_from_checks` → `grade`).

Arithmetic is exact (`fractions.Fraction`) up to one rounding of the points to one decimal,
half up; the band is read from the rounded points. See DECISIONS.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction
from typing import Any

from .version import SCORING_VERSION

__all__ = [
    "BANDS",
    "BEGIN_MARKER",
    "CAPS",
    "CHECKS",
    "CHECK_LABELS",
    "END_MARKER",
    "GRADES",
    "INSUFFICIENT_EVIDENCE",
    "PILLAR_WEIGHTS",
    "PROVISIONAL",
    "SCORING_VERSION",
    "Cap",
    "Check",
    "CheckValue",
    "Graded",
    "band",
    "check_by_id",
    "docs_block_problem",
    "extract_generated_block",
    "grade",
    "is_below_floor",
    "markdown",
    "round_points",
    "values_from_checks",
]

# Every 0.x version is provisional; 1.0.0 is the first calibrated release (a decision that is
# recorded in DECISIONS.md, never a side effect of another change).
PROVISIONAL = int(SCORING_VERSION.split(".")[0]) == 0

INSUFFICIENT_EVIDENCE = "insufficient_evidence"
PREVIEW = "preview"
STATUS_POINTS = {"pass": 100, "warn": 50, "fail": 0}

# Pillar → weight, in table order. Weights are renormalized over the pillars that were graded.
PILLAR_WEIGHTS: dict[str, int] = {
    "latency": 35,
    "reliability": 30,
    "capacity": 15,
    "observability": 10,
    "cost_and_cache": 10,
}

# Letter → the least points (after rounding) that reach it, best first.
BANDS: tuple[tuple[str, int], ...] = (("A", 90), ("B", 80), ("C", 70), ("D", 60), ("F", 0))
GRADES: tuple[str, ...] = tuple(letter for letter, _ in BANDS)


@dataclass(frozen=True)
class CheckValue:
    """One measured value handed to `grade`.

    `value` is a number (a boolean for `metrics_endpoint`, True = present); None means the
    scan could not measure it, and `reason` says why. `basis` names what a value was computed
    from where more than one basis is possible (e.g. "tokens" or "chunks").
    """

    value: float | bool | None
    reason: str | None = None
    basis: str | None = None


@dataclass(frozen=True)
class Check:
    """A check's rule: one measured value against two inclusive bounds."""

    id: str
    pillar: str
    measures: str
    unit: str
    op: str  # "<=" (lower is better), ">=" (higher is better) or "==" (a boolean)
    pass_value: float | bool
    warn_value: float | bool
    counted: bool = True
    label: str = ""  # as people read it (report.html, the site); the id stays in report.json

    def bounds(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """The report's `pass` and `warn` objects."""
        return ({"op": self.op, "value": self.pass_value},
                {"op": self.op, "value": self.warn_value})

    def status(self, value: float | bool) -> str:
        """pass, warn or fail for a measured value (both bounds inclusive)."""
        if self.op == "==":
            if value == self.pass_value:
                return "pass"
            return "warn" if value == self.warn_value else "fail"
        at_least = self.op == ">="
        for status, bound in (("pass", self.pass_value), ("warn", self.warn_value)):
            if (value >= bound) if at_least else (value <= bound):
                return status
        return "fail"


CHECKS: tuple[Check, ...] = (
    Check("ttft_p95_at_concurrency_1", "latency",
          "Time to first token, p95, with one request in flight", "ms", "<=", 800, 2000,
          label="Time to first token, p95, one request at a time"),
    Check("ttft_p99_load_ratio", "latency",
          "Time to first token under load: p99 at the highest level that had successes, "
          "divided by p99 with one request in flight", "ratio", "<=", 2, 4,
          label="Time to first token under load (p99, loaded ÷ alone)"),
    Check("inter_chunk_p95_at_concurrency_1", "latency",
          "Gap between consecutive content chunks, p95, with one request in flight",
          "ms", "<=", 100, 250,
          label="Gap between chunks, p95, one request at a time"),
    Check("error_rate", "reliability",
          "Share of requests that failed, every level together", "share", "<=",
          0.01, 0.05,
          label="Failed requests, all levels"),
    Check("error_rate_at_peak", "reliability",
          "Share of requests that failed at the highest concurrency level", "share",
          "<=", 0.01, 0.05,
          label="Failed requests at the highest level"),
    Check("generation_rate_load_ratio", "capacity",
          "Median per-stream generation rate at the highest level that had successes, "
          "divided by the median with one request in flight", "ratio", ">=", 0.7, 0.4,
          label="Per-stream speed under load (loaded ÷ alone)"),
    Check("usage_reported_share", "observability",
          "Share of successful streams that stated their token usage", "share", ">=",
          1, 0.5,
          label="Streams that stated their token usage"),
    Check("metrics_endpoint", "observability",
          "Prometheus metrics served at /metrics on the target's origin", "present",
          "==", True, False,
          label="Prometheus /metrics"),
    Check("repeat_prompt_share", "cost_and_cache",
          "Share of prompts in the supplied sample that exactly repeat an earlier one",
          "share", "<=", 0.1, 0.25,
          label="Repeated prompts in your sample"),
    Check("gpu_utilization_at_peak", "capacity",
          "Highest GPU utilization seen while the load ran", "share", ">=", 0.6, 0.3,
          counted=False,
          label="GPU utilization at peak"),
)
# Check ids → how people read them, from CHECKS (the one table).
CHECK_LABELS = {check.id: check.label for check in CHECKS}

_CHECKS_BY_ID = {check.id: check for check in CHECKS}


def check_by_id(check_id: str) -> Check:
    return _CHECKS_BY_ID[check_id]


@dataclass(frozen=True)
class Cap:
    """A mandatory minimum: when it applies, the grade is at best `grade_at_best`."""

    id: str
    grade_at_best: str
    applies_when: str
    applies: Callable[[Mapping[str, dict]], bool] = field(repr=False, compare=False)
    #: The check whose value triggers the cap, and the cap's own limit on it when that is not
    #: the check's fail bound (error_rate > 25 %): what `tokvera scan` names in its cap line.
    check: str = ""
    limit: float | None = None


def _measured(checks: Mapping[str, dict], check_id: str) -> float | bool | None:
    """The value of a check that was measured and counted, else None (an insufficient
    check triggers no cap)."""
    entry = checks[check_id]
    return entry["value"] if entry["counted"] else None


def _no_request_succeeded(checks: Mapping[str, dict]) -> bool:
    # Every request either succeeded or failed, so an error_rate of exactly 1 (n / n) means
    # that no request of any level succeeded. With no request at all, error_rate is not
    # measured and the cap cannot be established (there is no letter then either).
    error_rate = _measured(checks, "error_rate")
    return error_rate is not None and error_rate >= 1


def _error_rate_over(limit: float) -> Callable[[Mapping[str, dict]], bool]:
    def applies(checks: Mapping[str, dict]) -> bool:
        error_rate = _measured(checks, "error_rate")
        return error_rate is not None and error_rate > limit

    return applies


def _check_failed(check_id: str) -> Callable[[Mapping[str, dict]], bool]:
    def applies(checks: Mapping[str, dict]) -> bool:
        return checks[check_id]["status"] == "fail"

    return applies


CAPS: tuple[Cap, ...] = (
    Cap("no_successful_request", "F", "not a single request of any level streamed a reply",
        _no_request_succeeded, check="error_rate", limit=1),
    Cap("error_rate_over_25_percent", "F", "more than 25% of all requests failed",
        _error_rate_over(0.25), check="error_rate", limit=0.25),
    Cap("error_rate_over_5_percent", "D", "more than 5% of all requests failed",
        _error_rate_over(0.05), check="error_rate", limit=0.05),
    Cap("ttft_at_concurrency_1_failed", "C",
        "time to first token fails its threshold with only one request in flight",
        _check_failed("ttft_p95_at_concurrency_1"), check="ttft_p95_at_concurrency_1"),
    Cap("ttft_collapses_under_load", "C",
        "time to first token under load fails its threshold (ttft_p99_load_ratio)",
        _check_failed("ttft_p99_load_ratio"), check="ttft_p99_load_ratio"),
)


@dataclass(frozen=True)
class Graded:
    """The result of grading: report.json's `checks` (in table order) and `score`."""

    checks: list[dict]
    score: dict


def _validate(check: Check, value: Any) -> float | bool | None:
    if value is None:
        return None
    if check.op == "==":
        if not isinstance(value, bool):
            raise ValueError(f"{check.id}: expected a boolean value, got {value!r}")
        return value
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{check.id}: expected a finite number, got {value!r}")
    return value


def _check_entry(check: Check, given: CheckValue | None) -> dict:
    given = given if given is not None else CheckValue(None, "not measured")
    value = _validate(check, given.value)
    passes, warns = check.bounds()
    entry: dict[str, Any] = {
        "id": check.id,
        "pillar": check.pillar,
        "measures": check.measures,
        "value": value,
        "unit": check.unit,
        "pass": passes,
        "warn": warns,
    }
    if not check.counted:
        entry["status"] = PREVIEW
        entry["counted"] = False
        entry["reason"] = (given.reason or "not measured") if value is None else (
            "preview check: reported, never counted in the grade")
    elif value is None:
        entry["status"] = INSUFFICIENT_EVIDENCE
        entry["counted"] = False
        entry["reason"] = given.reason or "not measured"
    else:
        entry["status"] = check.status(value)
        entry["counted"] = True
    if given.basis is not None:
        entry["basis"] = given.basis
    return entry


def round_points(points: Fraction) -> Decimal:
    """Round exact points to one decimal, half up (86.25 → 86.3); the only rounding done."""
    tenths = math.floor(points * 10 + Fraction(1, 2))
    return Decimal(tenths) / 10


def band(points: Decimal | float) -> str:
    """The letter that (already rounded) points reach."""
    for letter, least in BANDS:
        if points >= least:
            return letter
    return GRADES[-1]


def _worst(grades: Iterable[str]) -> str:
    return max(grades, key=GRADES.index)


def grade(values: Mapping[str, CheckValue]) -> Graded:
    """Grade measured check values under scoring version `SCORING_VERSION`.

    A check id missing from `values` is insufficient_evidence ("not measured"); an unknown id
    or a value of the wrong type raises ValueError. Whether any request succeeded (for the
    `no_successful_request` cap) is read from `error_rate`: exactly 1 means none did.
    """
    unknown = sorted(set(values) - set(_CHECKS_BY_ID))
    if unknown:
        raise ValueError(f"unknown check id(s): {', '.join(unknown)}")
    checks = [_check_entry(check, values.get(check.id)) for check in CHECKS]
    by_id = {entry["id"]: entry for entry in checks}

    scores: dict[str, list[int]] = {}
    for entry in checks:
        if entry["counted"]:
            scores.setdefault(entry["pillar"], []).append(STATUS_POINTS[entry["status"]])
    graded = [pillar for pillar in PILLAR_WEIGHTS if pillar in scores]
    pillar_exact = {pillar: Fraction(sum(scores[pillar]), len(scores[pillar]))
                    for pillar in graded}
    caps = [cap for cap in CAPS if cap.applies(by_id)]

    score: dict[str, Any] = {
        "scoring_version": SCORING_VERSION,
        "provisional": PROVISIONAL,
        "grade": INSUFFICIENT_EVIDENCE,
        "points": None,
        "uncapped_grade": None,
        "caps_applied": [{"id": cap.id, "grade_at_best": cap.grade_at_best} for cap in caps],
        "effective_weight": {},
        "pillar_points": {pillar: float(pillar_exact[pillar]) for pillar in graded},
        "not_counted": [{"id": entry["id"], "reason": entry["reason"]}
                        for entry in checks if not entry["counted"]],
    }
    if "reliability" not in pillar_exact:
        score["reason"] = ("the reliability pillar has no graded check, so there is no "
                           "evidence that the endpoint answers requests")
        return Graded(checks, score)
    if len(graded) < 2:
        score["reason"] = (f"only {len(graded)} pillar could be graded; a letter needs at "
                           "least two")
        return Graded(checks, score)

    total_weight = sum(PILLAR_WEIGHTS[pillar] for pillar in graded)
    weights = {pillar: Fraction(PILLAR_WEIGHTS[pillar], total_weight) for pillar in graded}
    points = round_points(sum((weights[p] * pillar_exact[p] for p in graded), Fraction(0)))
    uncapped = band(points)
    score.update(
        grade=_worst([uncapped, *(cap.grade_at_best for cap in caps)]),
        points=float(points),
        uncapped_grade=uncapped,
        effective_weight={pillar: float(weights[pillar]) for pillar in graded},
    )
    return Graded(checks, score)


def values_from_checks(checks: Iterable[Mapping[str, Any]]) -> dict[str, CheckValue]:
    """The inverse of `Graded.checks`: read value, reason and basis back for re-grading."""
    values = {}
    for entry in checks:
        reason = entry.get("reason") if entry.get("value") is None else None
        values[entry["id"]] = CheckValue(entry.get("value"), reason, entry.get("basis"))
    return values


def is_below_floor(result: str, floor: str) -> bool:
    """True when the grade `result` is worse than `floor` (a letter). No letter
    (insufficient_evidence) is below every floor."""
    if floor not in GRADES:
        raise ValueError(f"not a grade: {floor!r} (expected one of {', '.join(GRADES)})")
    if result not in GRADES:
        return True
    return GRADES.index(result) > GRADES.index(floor)


# ---------------------------------------------------------------------------------------------
# The generated tables

BEGIN_MARKER = "<!-- BEGIN GENERATED: scans.grader.scoring.markdown() -->"
END_MARKER = "<!-- END GENERATED -->"


def _figure(value: float | bool) -> str:
    return str(value)


def _bound_cells(check: Check) -> tuple[str, str, str]:
    if check.op == "==":
        return "present", "absent", "never"
    if check.op == "<=":
        return (f"≤ {_figure(check.pass_value)}", f"≤ {_figure(check.warn_value)}",
                f"> {_figure(check.warn_value)}")
    return (f"≥ {_figure(check.pass_value)}", f"≥ {_figure(check.warn_value)}",
            f"< {_figure(check.warn_value)}")


def _table(header: tuple[str, ...], rows: Iterable[tuple[str, ...]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def markdown() -> str:
    """The scoring tables as Markdown: the block docs/scoring.md embeds between markers."""
    provisional_note = (
        "**Provisional.** These weights and thresholds have not yet been calibrated against "
        "real pilot scans and may change before scoring 1.0.0."
        if PROVISIONAL else "Calibrated scoring.")
    lines = [f"Scoring version: {SCORING_VERSION}", "", provisional_note, "",
             "### Pillar weights", ""]
    lines += _table(("Pillar", "Weight"),
                    ((pillar, str(weight)) for pillar, weight in PILLAR_WEIGHTS.items()))
    lines += ["", "### Checks", ""]
    lines += _table(
        ("Check", "Pillar", "Measures", "Pass", "Warn", "Fail", "Counted"),
        ((f"`{check.id}`", check.pillar, f"{check.measures} ({check.unit})",
          *_bound_cells(check),
          "yes" if check.counted else "no (preview)") for check in CHECKS))
    lines += ["", "### Grade bands", ""]
    lines += _table(("Grade", "Points at least"), ((letter, str(least)) for letter, least in BANDS))
    lines += ["", "### Mandatory-minimum caps", ""]
    lines += _table(("Cap", "Grade at best", "Applies when"),
                    ((f"`{cap.id}`", cap.grade_at_best, cap.applies_when) for cap in CAPS))
    return "\n".join(lines) + "\n"


def extract_generated_block(text: str) -> str | None:
    """The text between BEGIN_MARKER and END_MARKER, or None when either is missing."""
    start = text.find(BEGIN_MARKER)
    if start < 0:
        return None
    start += len(BEGIN_MARKER)
    end = text.find(END_MARKER, start)
    if end < 0:
        return None
    return text[start:end]


def docs_block_problem(text: str) -> str | None:
    """None when a document's generated block equals `markdown()` (surrounding blank lines
    aside), else a one-line description of the problem."""
    block = extract_generated_block(text)
    if block is None:
        return f"no generated block: expected {BEGIN_MARKER} … {END_MARKER}"
    if block.strip("\n") != markdown().strip("\n"):
        expected, found = markdown().strip("\n").splitlines(), block.strip("\n").splitlines()
        for number, (want, got) in enumerate(zip(expected, found, strict=False), start=1):
            if want != got:
                return (f"generated block differs from scans.grader.scoring.markdown() at line "
                        f"{number} of the block: expected {want!r}, found {got!r}")
        return (f"generated block differs from scans.grader.scoring.markdown(): expected "
                f"{len(expected)} lines, found {len(found)}")
    return None
