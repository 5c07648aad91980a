"""SLO windows in time (the Google SRE workbook's model): how long an endpoint met its team's
targets over the trailing 7 and 30 days, its error budget in time, and how fast it burns.

Time, not scan counts (DECISIONS.md, "SLO windows in time"):

- Each succeeded scan stands for the time from its start (`queued_at`) until the next finished
  scan of the endpoint, at most its endpoint's scan interval, and never past `now`. A gap longer
  than the interval is not covered: nobody looked.
- An errored scan is our side's failure: it stands for no time (it is uncovered, neither good
  nor bad) and ends the previous scan's time. Queued and running scans are not counted yet.
- A scan meets the SLO when it meets every target that is set: its grade is the floor or better
  (no letter is below every floor), TTFT p95 at concurrency 1 at most X ms, error rate at most
  Y; a target cannot be met on a value the scan did not measure. Its time is good or bad.
- A window of D days is [now - D days, now]; a scan that started before it counts only for its
  part inside. `covered_s` is its good plus bad time; `coverage` that over the window.
- Error budget = (1 - objective) x the window's length ("16 h 48 min of 7 d allowed");
  used = bad time. The window meets its objective while used <= budget. With little coverage
  the window says how much of it is covered, and the share (good / covered) is shown beside.
- Burn rate over the last 1 h and 6 h = (bad / covered time in that span) / (1 - objective):
  1 spends the budget exactly over the window, 14.4 over 1 h is the workbook's page-now rate.
  None when nothing in the span is covered, or the objective is 100 % (no budget to burn).

No scan count is ever divided: every share is a ratio of times. Each window carries the scoring
versions of the scans it counted (grades of different versions are not comparable).

One query per call, for any number of endpoints: the scans' pass/miss flags are computed in
SQL; the time arithmetic is one pass over (time, status, flags) rows in whole microseconds.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from fractions import Fraction

from django.db.models import BooleanField, ExpressionWrapper, F, FilteredRelation, Q
from django.utils import timezone

from scans.grader import scoring
from scans.history import scoped_to_teams
from scans.models import Endpoint, Scan, ScanStatus

__all__ = ["BURN_SPANS_H", "WINDOW_DAYS", "SloWindow", "TargetResult", "duration_text", "window",
           "windows_for"]

WINDOW_DAYS = (7, 30)
BURN_SPANS_H = (1, 6)
TTFT_CHECK = "ttft_p95_at_concurrency_1"
ERROR_RATE_CHECK = "error_rate"
LETTERS = scoring.GRADES
TARGET_KEYS = ("grade", "ttft_p95", "error_rate")


def duration_text(seconds: float | None) -> str:
    """43 min, 16 h 48 min, 2 d 4 h: what a person reads for a span of time."""
    if seconds is None:
        return "—"
    minutes = int(round(seconds / 60))
    if minutes < 60:
        return f"{minutes} min" if minutes or seconds <= 0 else "under 1 min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


@dataclass(frozen=True)
class TargetResult:
    key: str  # "grade", "ttft_p95" or "error_rate"
    label: str  # e.g. "grade B or better"
    missed_s: float  # covered time during which this target was missed
    covered_s: float

    @property
    def missed_text(self) -> str:
        return duration_text(self.missed_s)

    @property
    def share(self) -> float | None:
        """Share of the covered time meeting this target."""
        return 1 - self.missed_s / self.covered_s if self.covered_s else None


@dataclass(frozen=True)
class SloWindow:
    days: int
    window_s: float
    covered_s: float  # time stood for by succeeded scans
    bad_s: float  # covered time missing at least one target
    scans: int  # succeeded scans with time in the window
    errored: int  # errored scans in the window (uncovered time)
    targets: tuple[TargetResult, ...]
    objective: float
    versions: tuple[str, ...]  # scoring versions of the counted scans, sorted
    burn_rates: tuple[tuple[int, float | None, float], ...]  # (hours, rate, covered_s)

    @property
    def enough(self) -> bool:
        """Anything to say at all: some of the window is covered."""
        return self.covered_s > 0

    @property
    def empty_message(self) -> str:
        return "" if self.enough else f"no scan covers the last {self.days} days"

    @property
    def coverage(self) -> float:
        return self.covered_s / self.window_s

    @property
    def fully_covered(self) -> bool:
        return self.coverage >= 0.99

    @property
    def coverage_text(self) -> str:
        """'scans cover 2 h 10 min of 7 d (1.3 %)'."""
        return (f"scans cover {duration_text(self.covered_s)} of {self.days} d "
                f"({self.coverage:.1%})")

    @property
    def share(self) -> float | None:
        """Share of the covered time meeting every target; None when nothing is covered."""
        return 1 - self.bad_s / self.covered_s if self.covered_s else None

    @property
    def budget_s(self) -> float:
        """Time the window may miss the SLO: (1 - objective) x its length."""
        return float(self._budget)

    @property
    def budget_left_s(self) -> float:
        return float(self._budget - Fraction(self.bad_s))

    @property
    def budget_left(self) -> float | None:
        """What is left of the budget as a share of it: 1 untouched, 0 spent, below 0
        overspent; None with an objective of 100 % (no budget)."""
        if self._budget == 0:
            return None
        return float((self._budget - Fraction(self.bad_s)) / self._budget)

    @property
    def meets_objective(self) -> bool | None:
        if not self.enough:
            return None
        return Fraction(self.bad_s) <= self._budget

    @property
    def budget_text(self) -> str:
        """'16 h 48 min of 7 d allowed, 12 min used'."""
        return (f"{duration_text(self.budget_s)} of {self.days} d allowed, "
                f"{duration_text(self.bad_s)} used")

    @property
    def burn(self) -> list[dict]:
        """The burn rates as the page shows them: span, rate (None: nothing covered)."""
        return [{"hours": hours, "rate": rate, "covered": duration_text(covered)}
                for hours, rate, covered in self.burn_rates]

    @property
    def mixed_versions(self) -> bool:
        return len(self.versions) > 1

    @property
    def _budget(self) -> Fraction:
        return (1 - _exact(self.objective)) * Fraction(self.window_s)


def _exact(objective: float) -> Fraction:
    # 0.9 as a float is not 9/10; the decimal text of the stored figure is what the team meant.
    return Fraction(str(objective))


def _grade_ok() -> Q:
    """The scan's grade is its endpoint's floor or better (no letter never is)."""
    ok = Q(pk__in=[])
    for i, floor in enumerate(LETTERS):
        ok |= Q(endpoint__slo_grade_floor=floor, grade__in=LETTERS[: i + 1])
    return ok


def _value_ok(alias: str, target_field: str) -> Q:
    """The endpoint sets no target in `target_field`, or the scan measured the check joined as
    `alias` at or under it (an unmeasured value never meets a target)."""
    return (Q(**{f"endpoint__{target_field}__isnull": True})
            | Q(**{f"{alias}__value__isnull": False,
                   f"{alias}__value__lte": F(f"endpoint__{target_field}")}))


def _flag(q: Q) -> ExpressionWrapper:
    return ExpressionWrapper(q, output_field=BooleanField())


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_US = timedelta(microseconds=1)


def _us(at: datetime) -> int:
    """A time as whole microseconds since the epoch: sums of spans stay exact integers."""
    return (at - _EPOCH) // _US


def _spans(endpoint: Endpoint, rows: list[dict], now_us: int) -> list[tuple]:
    """What each succeeded scan stands for, as (start, end, missed per target key, version),
    times in microseconds: until the next finished scan, at most the endpoint's interval,
    never past now. Errored scans stand for nothing (they only end the previous span)."""
    interval_us = endpoint.interval_minutes * 60 * 1_000_000
    starts = [_us(row["queued_at"]) for row in rows]
    spans = []
    for i, row in enumerate(rows):
        if row["status"] != ScanStatus.SUCCEEDED:
            continue
        end = starts[i] + interval_us
        if i + 1 < len(rows):
            end = min(end, starts[i + 1])
        spans.append((starts[i], min(end, now_us),
                      {key: not row[f"{key}_ok"] for key in TARGET_KEYS},
                      row["scoring_version"]))
    return spans


def windows_for(endpoints: Iterable[Endpoint], days: int, now: datetime | None = None,
                location: str | None = None) -> dict[int, SloWindow]:
    """The `days`-day window of each endpoint (keyed by id), in one query; only the scans
    made from `location` when given (each location's scans stand for their own time).

    The endpoints must be ones the caller was allowed to see (fetched through the scoping
    layer); their scans are read through it too.
    """
    endpoints = list(endpoints)
    if not endpoints:
        return {}
    now = now or timezone.now()
    since = now - timedelta(days=days)
    # A scan started up to one interval before the window still stands for part of it.
    longest = max(e.interval_minutes for e in endpoints)
    scans = scoped_to_teams(Scan, {e.team_id for e in endpoints}).filter(
        endpoint__in=[e.pk for e in endpoints],
        queued_at__gt=since - timedelta(minutes=longest), queued_at__lte=now,
        status__in=[ScanStatus.SUCCEEDED, ScanStatus.ERRORED],
    )
    if location:
        scans = scans.filter(location=location)
    scans = scans.annotate(
        # Each scan's two check rows, joined once (LEFT JOIN on the unique (scan, check_id)).
        ttft=FilteredRelation("check_results", condition=Q(check_results__check_id=TTFT_CHECK)),
        errors=FilteredRelation("check_results",
                                condition=Q(check_results__check_id=ERROR_RATE_CHECK)),
    ).annotate(
        grade_ok=_flag(_grade_ok()), ttft_p95_ok=_flag(_value_ok("ttft", "slo_ttft_p95_ms")),
        error_rate_ok=_flag(_value_ok("errors", "slo_error_rate")),
    )
    rows: dict[int, list[dict]] = {e.pk: [] for e in endpoints}
    for row in scans.order_by("endpoint_id", "queued_at", "pk").values(
            "endpoint_id", "queued_at", "status", "scoring_version", "grade_ok", "ttft_p95_ok",
            "error_rate_ok"):
        rows[row["endpoint_id"]].append(row)

    now_us, since_us = _us(now), _us(since)
    burn_starts = [(hours, now_us - hours * 3_600_000_000) for hours in BURN_SPANS_H]
    result = {}
    for endpoint in endpoints:
        endpoint_rows = rows[endpoint.pk]
        keys = ["grade"]
        labels = {"grade": f"grade {endpoint.slo_grade_floor} or better"}
        if endpoint.slo_ttft_p95_ms is not None:
            keys.append("ttft_p95")
            labels["ttft_p95"] = (f"TTFT p95 at concurrency 1 at most "
                                  f"{endpoint.slo_ttft_p95_ms:g} ms")
        if endpoint.slo_error_rate is not None:
            keys.append("error_rate")
            labels["error_rate"] = f"error rate at most {endpoint.slo_error_rate:.2%}"
        # One pass over the spans: each one's part inside the window and the burn spans.
        covered = bad = counted = 0
        missed = dict.fromkeys(keys, 0)
        burn_covered = dict.fromkeys(BURN_SPANS_H, 0)
        burn_bad = dict.fromkeys(BURN_SPANS_H, 0)
        versions = set()
        for start, end, span_missed, version in _spans(endpoint, endpoint_rows, now_us):
            inside = min(end, now_us) - max(start, since_us)
            if inside <= 0:
                continue
            counted += 1
            versions.add(version)
            covered += inside
            missed_any = False
            for key in keys:
                if span_missed[key]:
                    missed[key] += inside
                    missed_any = True
            if missed_any:
                bad += inside
            for hours, burn_start in burn_starts:
                recent = min(end, now_us) - max(start, burn_start)
                if recent > 0:
                    burn_covered[hours] += recent
                    if missed_any:
                        burn_bad[hours] += recent
        budget_share = 1 - _exact(endpoint.slo_objective)
        burn = tuple(
            (hours,
             float(Fraction(burn_bad[hours], burn_covered[hours]) / budget_share)
             if burn_covered[hours] and budget_share else None,
             burn_covered[hours] / 1e6)
            for hours in BURN_SPANS_H)
        result[endpoint.pk] = SloWindow(
            days=days, window_s=float(days * 86400), covered_s=covered / 1e6, bad_s=bad / 1e6,
            scans=counted,
            errored=sum(1 for r in endpoint_rows
                        if r["status"] == ScanStatus.ERRORED and r["queued_at"] > since),
            targets=tuple(TargetResult(key, labels[key], missed[key] / 1e6, covered / 1e6)
                          for key in keys),
            objective=endpoint.slo_objective, versions=tuple(sorted(versions)),
            burn_rates=burn,
        )
    return result


def window(endpoint: Endpoint, days: int, now: datetime | None = None,
           location: str | None = None) -> SloWindow:
    """One endpoint's `days`-day window (from one scan location when given)."""
    return windows_for([endpoint], days, now, location)[endpoint.pk]
