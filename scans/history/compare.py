"""Compare two reports: each check's change and why the grade moved.

A pure function of two report.json dicts (no Django). The grade is explained from what the
score records: the caps that bind it (added or lifted), the points and the band they reach,
and each pillar's points weighted by its effective weight (the pillar's contribution).

Grades of different scoring versions are not comparable (the spec): `Comparison.same_version`
is False then, and the first reason says the two were computed under different versions
("0.9.0 vs 1.0.0"). When the later report is under this site's version and the earlier one is
not, `regraded_previous` re-grades the earlier one's stored values under it (scans.grader's
`regrade`, as `manage.py regrade_scans` does: never re-measuring), which is comparable, and the
first reason says what it gives.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from scans.endpoints import profile as load_profile
from scans.grader import (
    CHECK_LABELS,
    CHECKS,
    GRADES,
    PILLAR_WEIGHTS,
    SCORING_VERSION,
    cap_text,
    comparability,
    is_down,
    regrade,
    server_changes,
    server_text,
)

__all__ = ["FLAG_RELATIVE_CHANGE", "CheckChange", "Comparison", "FigureChange", "PillarChange",
           "compare"]

LETTERS = GRADES
# A measured value that moved by this share of its earlier value or more is flagged, even when
# its status did not change (TTFT 201 → 453 ms passes twice but is +125 %).
FLAG_RELATIVE_CHANGE = 0.25


class _Relative:
    """The relative change of a numeric before/after pair and whether it is flagged."""

    before_value: Any
    after_value: Any

    @property
    def relative_change(self) -> float | None:
        """(after - before) / |before|; None unless both are numbers and before is not 0."""
        before, after = _number(self.before_value), _number(self.after_value)
        if before is None or after is None or before == 0:
            return None
        return (after - before) / abs(before)

    @property
    def flagged(self) -> bool:
        change = self.relative_change
        return change is not None and abs(change) >= FLAG_RELATIVE_CHANGE


@dataclass(frozen=True)
class CheckChange(_Relative):
    id: str
    pillar: str
    unit: str
    before_value: Any
    after_value: Any
    before_status: str | None
    after_status: str | None
    delta: float | None  # after - before, when both are numbers

    @property
    def key(self) -> str:
        return self.id

    @property
    def label(self) -> str:
        return CHECK_LABELS.get(self.id, self.id)

    @property
    def status_changed(self) -> bool:
        return self.before_status != self.after_status

    @property
    def direction(self) -> str:
        """"better", "worse" or "same" status (pass > warn > fail > not measured)."""
        rank = {"pass": 3, "warn": 2, "fail": 1}
        before = rank.get(self.before_status or "", 0)
        after = rank.get(self.after_status or "", 0)
        return "better" if after > before else "worse" if after < before else "same"


@dataclass(frozen=True)
class FigureChange(_Relative):
    """A headline figure of the first level (one request at a time) in both reports."""

    key: str
    label: str
    unit: str
    before_value: float | None
    after_value: float | None


# The headline figures compared: (key, label, unit, level field, statistic).
FIGURES = (
    ("ttft_p50", "Time to first token, p50", "ms", "ttft_ms", "p50"),
    ("ttft_p95", "Time to first token, p95", "ms", "ttft_ms", "p95"),
    ("tokens_per_s", "Output speed per stream (median)", "/s", "generation_rate", "median"),
    ("first_answer_p50", "Time to first answer token, p50", "ms", "time_to_first_answer_ms",
     "p50"),
    ("thinking_p50", "Thinking time, p50", "ms", "thinking_ms", "p50"),
)


def _figures(before: Mapping[str, Any], after: Mapping[str, Any]) -> tuple[FigureChange, ...]:
    def first_level(report: Mapping[str, Any]) -> Mapping[str, Any]:
        levels = report.get("levels") or []
        return levels[0] if levels and isinstance(levels[0], Mapping) else {}

    def read(level: Mapping[str, Any], field_name: str, stat: str) -> float | None:
        figure = level.get(field_name)
        return _number(figure.get(stat)) if isinstance(figure, Mapping) else None

    b, a = first_level(before), first_level(after)
    changes = []
    for key, label, unit, field_name, stat in FIGURES:
        bv, av = read(b, field_name, stat), read(a, field_name, stat)
        if unit == "/s":  # the per-stream rate is in tokens or, without usage, chunks
            bases = {(lv.get(field_name) or {}).get("basis") for lv in (b, a)} - {None}
            unit = f"{bases.pop()}/s" if len(bases) == 1 else "tokens or chunks/s"
        if bv is not None or av is not None:
            changes.append(FigureChange(key, label, unit, bv, av))
    return tuple(changes)


@dataclass(frozen=True)
class PillarChange:
    pillar: str
    before_points: float | None
    after_points: float | None
    before_weight: float | None
    after_weight: float | None

    @property
    def before_contribution(self) -> float | None:
        if self.before_points is None or self.before_weight is None:
            return None
        return self.before_points * self.before_weight

    @property
    def after_contribution(self) -> float | None:
        if self.after_points is None or self.after_weight is None:
            return None
        return self.after_points * self.after_weight

    @property
    def contribution_delta(self) -> float | None:
        before, after = self.before_contribution, self.after_contribution
        if before is None and after is None:
            return None
        return (after or 0.0) - (before or 0.0)


@dataclass(frozen=True)
class Comparison:
    before_version: str
    after_version: str
    before_grade: str
    after_grade: str
    before_points: float | None
    after_points: float | None
    before_uncapped: str | None
    after_uncapped: str | None
    caps_added: tuple[dict, ...]
    caps_lifted: tuple[dict, ...]
    caps_kept: tuple[dict, ...]
    checks: tuple[CheckChange, ...]
    pillars: tuple[PillarChange, ...]
    reasons: tuple[str, ...] = field(default=())
    regraded_previous: dict | None = None  # the previous score under this site's version
    figures: tuple[FigureChange, ...] = field(default=())
    # The load each scan ran (report.plan, scans/endpoints/profile.py) and, when they differ, why: the
    # grader's comparability() on the workload, and the levels or requests.
    before_profile: str = ""
    after_profile: str = ""
    load_differences: tuple[str, ...] = field(default=())
    # What each server said of itself (report.server) and what changed between the two, facts
    # stated on both sides only: another engine, version or hardware is another server.
    before_server: str = ""
    after_server: str = ""
    server_changes: tuple[str, ...] = field(default=())
    # Down is a state, not a grade (scans.grader.is_down): a down side has its cause
    # instead of a letter and points, and nothing is said of its grade.
    before_down: bool = False
    after_down: bool = False
    before_cause: str = ""
    after_cause: str = ""
    # What is compared: "scans" (of one endpoint, earlier → later) or "endpoints" (left and
    # right), and how each side is named in the sentences.
    between: str = "scans"
    before_label: str = "the previous scan"
    after_label: str = "this scan"

    @property
    def any_down(self) -> bool:
        return self.before_down or self.after_down

    @property
    def same_load(self) -> bool:
        return not self.load_differences

    @property
    def flagged(self) -> tuple[CheckChange | FigureChange, ...]:
        """Every figure and check value that moved by FLAG_RELATIVE_CHANGE or more."""
        changes: tuple[CheckChange | FigureChange, ...] = (*self.figures, *self.checks)
        return tuple(c for c in changes if c.flagged)

    @property
    def same_version(self) -> bool:
        return self.before_version == self.after_version

    @property
    def grade_moved(self) -> str:
        """"up", "down" or "same" (a scan with no letter ranks below F); "none" when a side is
        down (there is no grade to move)."""
        if self.any_down:
            return "none"
        before, after = _rank(self.before_grade), _rank(self.after_grade)
        return "up" if after < before else "down" if after > before else "same"

    @property
    def points_delta(self) -> float | None:
        if self.any_down or self.before_points is None or self.after_points is None:
            return None
        return round(self.after_points - self.before_points, 1)


def _rank(grade: str) -> int:
    return LETTERS.index(grade) if grade in LETTERS else len(LETTERS)


def _letter(grade: str | None) -> str:
    return grade if grade in LETTERS else "no letter"


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _down_cause(report: Mapping[str, Any]) -> str:
    """Why a down report's endpoint did not answer: the preflight's cause, else the failure
    summary's sentence."""
    preflight = report.get("preflight") or {}
    if preflight.get("stopped") and preflight.get("cause"):
        return str(preflight["cause"])
    summary = report.get("failure_summary") or {}
    return str(summary.get("sentence") or "no request succeeded")


def compare(before: Mapping[str, Any], after: Mapping[str, Any], *, between: str = "scans",
            labels: tuple[str, str] = ("the previous scan", "this scan")) -> Comparison:
    """How `after` (a report) differs from `before` (an earlier report of the same endpoint,
    or, `between="endpoints"`, another endpoint's latest), each side named by `labels`."""
    b_score, a_score = before["score"], after["score"]
    b_checks = {c["id"]: c for c in before.get("checks", [])}
    a_checks = {c["id"]: c for c in after.get("checks", [])}
    order = [c.id for c in CHECKS]
    ids = [i for i in order if i in b_checks or i in a_checks]
    ids += sorted((set(b_checks) | set(a_checks)) - set(ids))
    checks = []
    for check_id in ids:
        b, a = b_checks.get(check_id, {}), a_checks.get(check_id, {})
        b_num, a_num = _number(b.get("value")), _number(a.get("value"))
        checks.append(CheckChange(
            id=check_id, pillar=a.get("pillar") or b.get("pillar", ""),
            unit=a.get("unit") or b.get("unit", ""),
            before_value=b.get("value"), after_value=a.get("value"),
            before_status=b.get("status"), after_status=a.get("status"),
            delta=None if b_num is None or a_num is None else a_num - b_num,
        ))

    b_caps = {c["id"]: c for c in b_score.get("caps_applied", [])}
    a_caps = {c["id"]: c for c in a_score.get("caps_applied", [])}
    pillars = []
    for pillar in dict.fromkeys([*PILLAR_WEIGHTS, *b_score.get("pillar_points", {}),
                                 *a_score.get("pillar_points", {})]):
        bp = b_score.get("pillar_points", {}).get(pillar)
        ap = a_score.get("pillar_points", {}).get(pillar)
        if bp is None and ap is None:
            continue
        pillars.append(PillarChange(
            pillar, bp, ap, b_score.get("effective_weight", {}).get(pillar),
            a_score.get("effective_weight", {}).get(pillar)))

    comparison = Comparison(
        before_version=str(b_score.get("scoring_version", "")),
        after_version=str(a_score.get("scoring_version", "")),
        before_grade=b_score.get("grade", ""), after_grade=a_score.get("grade", ""),
        before_points=b_score.get("points"), after_points=a_score.get("points"),
        before_uncapped=b_score.get("uncapped_grade"),
        after_uncapped=a_score.get("uncapped_grade"),
        caps_added=tuple(a_caps[i] for i in a_caps if i not in b_caps),
        caps_lifted=tuple(b_caps[i] for i in b_caps if i not in a_caps),
        caps_kept=tuple(a_caps[i] for i in a_caps if i in b_caps),
        checks=tuple(checks), pillars=tuple(pillars),
    )
    regraded = None
    if (not comparison.same_version
            and comparison.after_version == SCORING_VERSION and before.get("checks")):
        try:
            regraded = regrade(before, SCORING_VERSION)["score"]
        except (ValueError, KeyError, TypeError):
            regraded = None  # a check this version does not know: nothing comparable to show
    b_down, a_down = is_down(before), is_down(after)
    comparison = Comparison(**{**comparison.__dict__,
                               "before_down": b_down, "after_down": a_down,
                               "before_cause": _down_cause(before) if b_down else "",
                               "after_cause": _down_cause(after) if a_down else "",
                               "between": between, "before_label": labels[0],
                               "after_label": labels[1],
                               "before_profile": load_profile.profile_of(before.get("plan")).label,
                               "after_profile": load_profile.profile_of(after.get("plan")).label,
                               "load_differences": _load_differences(before, after),
                               "before_server": server_text(before.get("server")),
                               "after_server": server_text(after.get("server")),
                               "server_changes": tuple(server_changes(before.get("server"),
                                                                      after.get("server"))),
                               "regraded_previous": regraded})
    return Comparison(**{**comparison.__dict__, "reasons": _reasons(comparison, a_score,
                                                                      b_score),
                         "figures": _figures(before, after)})


def _load_differences(before: Mapping[str, Any], after: Mapping[str, Any]) -> tuple[str, ...]:
    """Why the two scans' loads are not the same (empty when they are)."""
    differences = [reason for reason in comparability(before, after)
                   if reason.startswith("workloads differ")]
    b_plan, a_plan = before.get("plan") or {}, after.get("plan") or {}
    for key, words in (("levels", "levels"), ("requests_per_level", "requests per level")):
        if b_plan.get(key) != a_plan.get(key):
            differences.append(f"{words} differ: {b_plan.get(key)!r} vs {a_plan.get(key)!r}")
    return tuple(differences)


def _sentence_start(label: str) -> str:
    """"the previous scan" → "The previous scan"; an endpoint's name is left as it is."""
    return label[:1].upper() + label[1:] if label.startswith(("the ", "this ")) else label


def _down_reasons(c: Comparison, before_name: str, after_name: str) -> tuple[str, ...]:
    """A down side has no grade: say so and why, and nothing of points or pillars."""
    down = []
    for name, is_down_, cause in ((before_name, c.before_down, c.before_cause),
                                  (after_name, c.after_down, c.after_cause)):
        if is_down_:
            verb = "is down in its latest scan" if c.between == "endpoints" else "was down"
            down.append(f"{name} {verb}: {cause}.")
    return ("Down is a state, not a grade: a scan where the endpoint did not answer has no "
            "letter and no points, so there is no grade to compare.", *down)


def _cap_reasons(c: Comparison, two: bool) -> list[str]:
    """Each cap that binds one side or both, in the scoring table's words, its id beside."""
    reasons = []
    for cap in c.caps_added:
        reasons.append(f"The cap “{cap_text(cap['id'])}” ({cap['id']}) "
                       f"{'applies to ' + c.after_label + ' only' if two else 'now applies'}: "
                       f"the grade can be no better than {cap['grade_at_best']}.")
    for cap in c.caps_lifted:
        lifted = "applies to " + c.before_label + " only" if two else "no longer applies"
        reasons.append(f"The cap “{cap_text(cap['id'])}” ({cap['id']}, at best "
                       f"{cap['grade_at_best']}) {lifted}.")
    for cap in c.caps_kept:
        reasons.append(f"The cap “{cap_text(cap['id'])}” ({cap['id']}) "
                       f"{'applies to both' if two else 'still applies'} "
                       f"(at best {cap['grade_at_best']}).")
    return reasons


def _reasons(c: Comparison, a_score: Mapping, b_score: Mapping) -> tuple[str, ...]:
    """Plain sentences on why the grade moved (or held), most decisive first."""
    before_name, after_name = _sentence_start(c.before_label), _sentence_start(c.after_label)
    two = c.between == "endpoints"
    if c.any_down:
        return _down_reasons(c, before_name, after_name)
    reasons = []
    before, after = _letter(c.before_grade), _letter(c.after_grade)
    if c.after_grade not in LETTERS:
        reasons.append(f"{after_name} has no letter: "
                       f"{a_score.get('reason', 'not enough evidence')}.")
    if c.before_grade not in LETTERS and c.after_grade in LETTERS:
        reasons.append(f"{before_name} had no letter: "
                       f"{b_score.get('reason', 'not enough evidence')}.")
    reasons += _cap_reasons(c, two)
    if two and c.before_points is not None and c.after_points is not None:
        delta = c.points_delta or 0.0
        reasons.append(
            f"{before_name} has {c.before_points:.1f} points (band "
            f"{_letter(c.before_uncapped)}), {c.after_label} {c.after_points:.1f} (band "
            f"{_letter(c.after_uncapped)})"
            + (f": {delta:+.1f} points from left to right." if delta else ", the same."))
    elif c.before_points is not None and c.after_points is not None:
        delta = c.points_delta or 0.0
        if delta:
            reasons.append(
                f"The points went from {c.before_points:.1f} to {c.after_points:.1f} "
                f"({delta:+.1f}); the band they reach went from "
                f"{_letter(c.before_uncapped)} to {_letter(c.after_uncapped)}.")
        else:
            reasons.append(f"The points held at {c.after_points:.1f} "
                           f"(band {_letter(c.after_uncapped)}).")
    moved = sorted((p for p in c.pillars if p.contribution_delta),
                   key=lambda p: -abs(p.contribution_delta or 0.0))
    for pillar in moved:
        bp = "not graded" if pillar.before_points is None else f"{pillar.before_points:.1f}"
        ap = "not graded" if pillar.after_points is None else f"{pillar.after_points:.1f}"
        reasons.append(f"{pillar.pillar}: {bp} → {ap} pillar points, "
                       f"{pillar.contribution_delta:+.1f} points to the total.")
    if two:
        summary = (f"Both grade {after}" if before == after
                   else f"{before_name} grades {before}, {c.after_label} {after}")
    else:
        summary = ("The grade held at " + after if before == after
                   else f"The grade went from {before} to {after}")
    if c.same_version and not c.same_load:
        summary = (f"The scans ran different loads ({c.before_profile}; {c.after_profile}): "
                   f"their grades are not comparable. {summary}, but across loads that says "
                   "little; compare the measured values below with that in mind")
    if not c.same_version:
        summary = (f"{_versions_sentence(c)} {summary}, but across versions that says "
                   f"nothing; {_regraded_clause(c)}")
    return (summary + ".", *reasons)


def _versions_sentence(c: Comparison) -> str:
    """The two grades' versions, plainly: "... computed under different scoring versions
    (0.9.0 vs 1.0.0)"."""
    return (f"The two grades were computed under different scoring versions "
            f"({c.before_version or 'unknown'} vs {c.after_version or 'unknown'}): they are "
            "not comparable.")


def _regraded_clause(c: Comparison) -> str:
    """Where the comparable figure is: the earlier report re-graded under the later one's
    version, else the measured values."""
    regraded = c.regraded_previous
    if not regraded:
        return "compare the measured values below"
    points = regraded.get("points")
    figure = _letter(regraded.get("grade")) + (f" with {points:.1f} points"
                                              if isinstance(points, int | float) else "")
    return (f"re-graded under {regraded.get('scoring_version')} from its stored values "
            f"(nothing re-measured), {c.before_label} would be {figure}, which is comparable "
            f"with {c.after_label}")
