"""Scoring: turns measured check values into statuses, pillar points, caps and a grade.

The rules (check ids, pillars, bounds, weights, bands, caps) of every scoring version are in
scans/grader/scoring_rules.py (docs/scoring.md; 1.0.0's calibration in docs/calibration.md);
`markdown()` renders the current version's as the tables that docs/scoring.md embeds, and a
test fails when the two differ. A report is graded under one version and says which.

Scoring knows nothing of HTTP or Django. It never measures: it grades the values it is given,
so a stored report can be re-graded from its numbers (`values_from_checks` → `grade`).

Arithmetic is exact (`fractions.Fraction`) up to one rounding of the points to one decimal,
half up; the band is read from the rounded points. See DECISIONS.md.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Any

from .scoring_rules import RULES, SCORING_VERSIONS, Cap, Check, Rules
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
    "SCORING_VERSIONS",
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
    "rules_for",
    "values_from_checks",
]

CURRENT = RULES[SCORING_VERSION]
PROVISIONAL = CURRENT.provisional

INSUFFICIENT_EVIDENCE = "insufficient_evidence"
PREVIEW = "preview"
STATUS_POINTS = {"pass": 100, "warn": 50, "fail": 0}

# The current version's tables (re-grading under another version reads RULES).
# Pillar → weight, in table order. Weights are renormalized over the pillars that were graded.
PILLAR_WEIGHTS: dict[str, int] = CURRENT.pillar_weights
# Letter → the least points (after rounding) that reach it, best first.
BANDS: tuple[tuple[str, int], ...] = CURRENT.bands
GRADES: tuple[str, ...] = tuple(letter for letter, _ in BANDS)
CHECKS: tuple[Check, ...] = CURRENT.checks
CAPS: tuple[Cap, ...] = CURRENT.caps


@dataclass(frozen=True)
class CheckValue:
    """One measured value handed to `grade`.

    `value` is a number (a boolean for `metrics_endpoint`, True = present); None means the
    scan could not measure it, and `reason` says why. `basis` names what a value was computed
    from where more than one basis is possible (e.g. "tokens" or "chunks"). `input_tokens` is
    the prompt length a check whose bounds follow the workload is judged at; `loaded_p99_ms`
    the loaded figure behind a load ratio (held to the bounds its check names).
    """

    value: float | bool | None
    reason: str | None = None
    basis: str | None = None
    input_tokens: float | None = None
    loaded_p99_ms: float | None = None


# Check ids → how people read them, from CHECKS (the one table).
CHECK_LABELS = {check.id: check.label for check in CHECKS}

_CHECKS_BY_ID = {check.id: check for check in CHECKS}


def check_by_id(check_id: str) -> Check:
    return _CHECKS_BY_ID[check_id]


def rules_for(version: str | None) -> Rules:
    """The rules of a scoring version (None: the current one); ValueError for one never
    published."""
    if version is None:
        return CURRENT
    try:
        return RULES[version]
    except KeyError:
        raise ValueError(f"unknown scoring version {version!r} (known: "
                         f"{', '.join(SCORING_VERSIONS)})") from None


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


_STATUS_ORDER = ("pass", "warn", "fail")


def _check_entry(check: Check, given: CheckValue | None, rules: Rules) -> dict:
    given = given if given is not None else CheckValue(None, "not measured")
    value = _validate(check, given.value)
    follows_prompt = check.per_1k_input_tokens is not None or check.loaded_within is not None
    input_tokens = given.input_tokens if follows_prompt else None
    passes, warns = check.bounds(input_tokens)
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
        entry["status"] = check.status(value, input_tokens)
        entry["counted"] = True
    if given.basis is not None:
        entry["basis"] = given.basis
    if input_tokens is not None:
        entry["input_tokens"] = input_tokens
    if check.loaded_within is not None and given.loaded_p99_ms is not None:
        within = rules.check(check.loaded_within)
        entry["loaded_p99_ms"] = given.loaded_p99_ms
        loaded_pass, loaded_warn = within.limits(input_tokens)
        entry["loaded_within"] = {"check": within.id, "pass": loaded_pass, "warn": loaded_warn}
        if entry["counted"]:
            loaded = within.status(given.loaded_p99_ms, input_tokens)
            entry["status"] = min(entry["status"], loaded, key=_STATUS_ORDER.index)
    return entry


def round_points(points: Fraction) -> Decimal:
    """Round exact points to one decimal, half up (86.25 → 86.3); the only rounding done."""
    tenths = math.floor(points * 10 + Fraction(1, 2))
    return Decimal(tenths) / 10


def band(points: Decimal | float, bands: tuple[tuple[str, int], ...] = BANDS) -> str:
    """The letter that (already rounded) points reach."""
    for letter, least in bands:
        if points >= least:
            return letter
    return GRADES[-1]


def _worst(grades: Iterable[str]) -> str:
    return max(grades, key=GRADES.index)


def grade(values: Mapping[str, CheckValue], version: str | None = None) -> Graded:
    """Grade measured check values under a scoring version (default: `SCORING_VERSION`).

    A check id missing from `values` is insufficient_evidence ("not measured"); an unknown id
    or a value of the wrong type raises ValueError. Whether any request succeeded (for the
    `no_successful_request` cap) is read from `error_rate`: exactly 1 means none did.
    """
    rules = rules_for(version)
    unknown = sorted(set(values) - {check.id for check in rules.checks})
    if unknown:
        raise ValueError(f"unknown check id(s): {', '.join(unknown)}")
    checks = [_check_entry(check, values.get(check.id), rules) for check in rules.checks]
    by_id = {entry["id"]: entry for entry in checks}

    scores: dict[str, list[int]] = {}
    for entry in checks:
        if entry["counted"]:
            scores.setdefault(entry["pillar"], []).append(STATUS_POINTS[entry["status"]])
    graded = [pillar for pillar in rules.pillar_weights if pillar in scores]
    pillar_exact = {pillar: Fraction(sum(scores[pillar]), len(scores[pillar]))
                    for pillar in graded}
    caps = [cap for cap in rules.caps if cap.applies(by_id)]

    score: dict[str, Any] = {
        "scoring_version": rules.version,
        "provisional": rules.provisional,
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

    total_weight = sum(rules.pillar_weights[pillar] for pillar in graded)
    weights = {pillar: Fraction(rules.pillar_weights[pillar], total_weight) for pillar in graded}
    points = round_points(sum((weights[p] * pillar_exact[p] for p in graded), Fraction(0)))
    uncapped = band(points, rules.bands)
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
        values[entry["id"]] = CheckValue(entry.get("value"), reason, entry.get("basis"),
                                         entry.get("input_tokens"), entry.get("loaded_p99_ms"))
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
    grows = ("", "")
    if check.per_1k_input_tokens is not None:
        per_pass, per_warn = (_figure(v) for v in check.per_1k_input_tokens)
        grows = (f" + {per_pass} per 1,000 input tokens", f" + {per_warn} per 1,000 input tokens")
    if check.op == "<=":
        return (f"≤ {_figure(check.pass_value)}{grows[0]}", f"≤ {_figure(check.warn_value)}{grows[1]}",
                f"> {_figure(check.warn_value)}{grows[1]}")
    return (f"≥ {_figure(check.pass_value)}", f"≥ {_figure(check.warn_value)}",
            f"< {_figure(check.warn_value)}")


def _table(header: tuple[str, ...], rows: Iterable[tuple[str, ...]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def markdown(version: str | None = None) -> str:
    """The scoring tables as Markdown: the block docs/scoring.md embeds between markers (the
    current version), or another version's tables."""
    rules = rules_for(version)
    provisional_note = (
        "**Provisional.** These weights and thresholds have not yet been calibrated against "
        "real pilot scans and may change before scoring 1.0.0."
        if rules.provisional else
        "Calibrated against pilot scans and published references (docs/calibration.md).")
    lines = [f"Scoring version: {rules.version}", "", provisional_note, "",
             "### Pillar weights", ""]
    lines += _table(("Pillar", "Weight"),
                    ((pillar, str(weight)) for pillar, weight in rules.pillar_weights.items()))
    lines += ["", "### Checks", ""]
    lines += _table(
        ("Check", "Pillar", "Measures", "Pass", "Warn", "Fail", "Counted"),
        ((f"`{check.id}`", check.pillar, f"{check.measures} ({check.unit})",
          *_bound_cells(check),
          "yes" if check.counted else "no (preview)") for check in rules.checks))
    lines += ["", "### Where each bound comes from", ""]
    lines += _table(("Check", "Source"),
                    ((f"`{check.id}`", check.source) for check in rules.checks))
    lines += ["", "### Grade bands", ""]
    lines += _table(("Grade", "Points at least"),
                    ((letter, str(least)) for letter, least in rules.bands))
    lines += ["", "### Mandatory-minimum caps", ""]
    lines += _table(("Cap", "Grade at best", "Applies when"),
                    ((f"`{cap.id}`", cap.grade_at_best, cap.applies_when) for cap in rules.caps))
    return "\n".join(lines) + "\n"


def extract_generated_block(text: str, begin: str = BEGIN_MARKER,
                            end: str = END_MARKER) -> str | None:
    """The text between `begin` and `end`, or None when either is missing."""
    start = text.find(begin)
    if start < 0:
        return None
    start += len(begin)
    stop = text.find(end, start)
    if stop < 0:
        return None
    return text[start:stop]


def block_problem(text: str, expected: str, begin: str = BEGIN_MARKER,
                  end: str = END_MARKER, source: str = "scans.grader.scoring.markdown()"
                  ) -> str | None:
    """None when a document's generated block equals `expected` (surrounding blank lines
    aside), else a one-line description of the problem."""
    block = extract_generated_block(text, begin, end)
    if block is None:
        return f"no generated block: expected {begin} … {end}"
    if block.strip("\n") != expected.strip("\n"):
        wanted, found = expected.strip("\n").splitlines(), block.strip("\n").splitlines()
        for number, (want, got) in enumerate(zip(wanted, found, strict=False), start=1):
            if want != got:
                return (f"generated block differs from {source} at line {number} of the "
                        f"block: expected {want!r}, found {got!r}")
        return (f"generated block differs from {source}: expected {len(wanted)} lines, "
                f"found {len(found)}")
    return None


def docs_block_problem(text: str) -> str | None:
    """None when a document's generated block equals `markdown()`, else the problem."""
    return block_problem(text, markdown())
