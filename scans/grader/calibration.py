"""The calibration table: stored pilot scans re-graded under every scoring version.

A pilot file (calibration/pilots/*.json) is a report.json that `tokvera scan` wrote, trimmed of
its per-request samples, with the conditions it ran under:

    {"pilot": {"id": "cpu-1slot-chat", "engine": "llama.cpp llama-server b…", "model": "…",
               "hardware": "…", "flags": "…", "command": "tokvera scan …", "date": "…"},
     "report": {…report.json without samples…}}

`table(pilots)` re-grades each report from its stored values under each version (never
re-measuring) and lines up, per check, the bounds and each pilot's value and status; `tokvera
calibrate` prints it, docs/calibration.md embeds its Markdown, and a test keeps the two equal.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scans.grader import scoring
from scans.grader.report import regrade, stored_input_tokens
from scans.grader.scoring_rules import RULES, Check

__all__ = ["Pilot", "PilotError", "block_problem", "load_pilot", "markdown", "table_rows",
           "trimmed"]

BEGIN_MARKER = "<!-- BEGIN GENERATED: tokvera calibrate calibration/pilots/*.json --markdown -->"
END_MARKER = "<!-- END GENERATED -->"

# What a pilot keeps of a report: everything but the per-request samples (a summary, not
# megabytes): each level's figures stay, so anyone can re-grade and re-read the pilot.
_SAMPLE_KEYS = ("ttft_samples_ms", "request_timelines", "failure_examples")
CONDITIONS = ("id", "engine", "model", "hardware", "flags", "command", "date")


class PilotError(ValueError):
    """A pilot file that cannot be read as one."""


@dataclass(frozen=True)
class Pilot:
    id: str
    conditions: Mapping[str, str]
    report: Mapping[str, Any]
    path: str

    def graded(self, version: str) -> dict:
        return regrade(self.report, version)

    @property
    def input_tokens(self) -> float | None:
        return stored_input_tokens(self.report)


def trimmed(report: Mapping[str, Any]) -> dict:
    """A report without its per-request samples (what a pilot file keeps)."""
    kept = dict(report)
    kept["levels"] = [{k: v for k, v in level.items() if k not in _SAMPLE_KEYS}
                      for level in report.get("levels") or []]
    return kept


def load_pilot(path: str | Path) -> Pilot:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise PilotError(f"{path}: cannot read a pilot: {exc}") from None
    conditions = data.get("pilot") if isinstance(data, dict) else None
    report = data.get("report") if isinstance(data, dict) else None
    if not isinstance(conditions, dict) or not isinstance(report, dict) or not isinstance(
            report.get("checks"), list):
        raise PilotError(f"{path}: not a pilot (expected {{\"pilot\": {{…}}, \"report\": "
                         "{…report.json…}})")
    missing = [key for key in CONDITIONS if not conditions.get(key)]
    if missing:
        raise PilotError(f"{path}: the pilot's conditions lack {', '.join(missing)}")
    return Pilot(str(conditions["id"]), conditions, report, str(path))


def _number(value: float) -> str:
    return f"{value:,.3f}".rstrip("0").rstrip(".") if value != int(value) else f"{int(value):,}"


def _value_text(check: Check, value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "present" if value else "absent"
    if check.unit == "ms":
        return f"{value:,.0f} ms"
    if check.unit == "share":
        return f"{value * 100:.1f} %"
    return f"{value:.2f}"


def _bound_text(check: Check, input_tokens: float | None) -> str:
    """A check's pass / warn bounds, at the pilot's prompt length where they follow it."""
    if check.op == "==":
        return "present"
    passes, warns = check.limits(input_tokens)
    assert not isinstance(passes, bool) and not isinstance(warns, bool)
    op = {"<=": "≤", ">=": "≥"}[check.op]
    return f"{op} {_number(passes)} / {_number(warns)}"


def table_rows(pilots: Sequence[Pilot]) -> tuple[list[str], list[list[str]], list[list[str]]]:
    """(versions, the per-check rows, the grade rows) of the calibration table."""
    versions = list(RULES)
    graded = {(p.id, v): p.graded(v) for p in pilots for v in versions}
    check_rows: list[list[str]] = []
    for check_id in [c.id for c in RULES[versions[-1]].checks]:
        for pilot in pilots:
            row = [check_id, pilot.id]
            for version in versions:
                check = RULES[version].check(check_id)
                entry = next(e for e in graded[(pilot.id, version)]["checks"]
                             if e["id"] == check_id)
                row += [_bound_text(check, pilot.input_tokens), entry["status"]]
            entry = next(e for e in pilot.report["checks"] if e["id"] == check_id)
            row.insert(2, _value_text(RULES[versions[-1]].check(check_id), entry.get("value")))
            check_rows.append(row)
    grade_rows = []
    for pilot in pilots:
        row = [pilot.id, _number(pilot.input_tokens) if pilot.input_tokens else "—"]
        for version in versions:
            score = graded[(pilot.id, version)]["score"]
            letter = score["grade"] if score["grade"] in scoring.GRADES else "no grade"
            caps = ", ".join(c["id"] for c in score["caps_applied"])
            points = "" if score["points"] is None else f" {score['points']}"
            row.append(f"{letter}{points}" + (f" (cap: {caps})" if caps else ""))
        grade_rows.append(row)
    return versions, check_rows, grade_rows


def block_problem(text: str, expected: str) -> str | None:
    """None when a document's calibration block equals `expected`, else the problem."""
    return scoring.block_problem(text, expected, BEGIN_MARKER, END_MARKER,
                                 source="tokvera calibrate --markdown")


def _md_table(header: Iterable[str], rows: Iterable[Iterable[str]]) -> list[str]:
    header = list(header)
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def markdown(pilots: Sequence[Pilot]) -> str:
    """The pilots, the per-check table and the grades as Markdown (docs/calibration.md)."""
    versions, check_rows, grade_rows = table_rows(pilots)
    lines = ["### Pilots", ""]
    lines += _md_table(("Pilot", "Engine", "Model", "Hardware", "Flags", "Date"),
                       ((p.id, *(str(p.conditions[k]) for k in
                                 ("engine", "model", "hardware", "flags", "date")))
                        for p in pilots))
    lines += ["", "### Checks, bounds (pass / warn) and statuses under each version", ""]
    header = ["Check", "Pilot", "Value"]
    for version in versions:
        header += [f"{version} bounds", f"{version} status"]
    lines += _md_table(header, ([f"`{row[0]}`", *row[1:]] for row in check_rows))
    lines += ["", "### Grades", ""]
    lines += _md_table(["Pilot", "Input tokens", *versions], grade_rows)
    return "\n".join(lines) + "\n"
