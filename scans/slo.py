"""SLO windows: how an endpoint met its team's targets over the trailing 7 and 30 days.

A window counts the endpoint's *succeeded* scans queued in (now - days, now]. For each target:

- grade floor: the scan's grade is the floor or better. A scan with no letter
  (insufficient_evidence) is below every floor, as `tokvera scan --fail-under` treats it.
- TTFT p95 at concurrency 1 at most X ms (when set): read from the scan's
  `ttft_p95_at_concurrency_1` check value. A scan that could not measure it misses the target:
  a target cannot be met on evidence the scan does not have.
- error rate at most Y (when set): read from the `error_rate` check value, same rule.

A scan meets the SLO when it meets every target that is set; the window's share is the share
of its scans that do, compared with the endpoint's `slo_objective`. The error budget is the
share of scans allowed to miss, (1 - objective) x scans; what is left of it is reported in
scans and as a share of the budget (below 0 when overspent).

Errored scans are our side's failure, not the endpoint's: they are left out of the shares and
counted separately (they alert on their own). Queued and running scans are not counted yet.

A window with fewer than `MIN_SCANS` counted scans reports "not enough scans in N days" and no
share at all: never a made-up zero. Five is the fewest at which one scan moves the share by at
most 20 points, and the slowest schedule allowed (one scan a day) still fills a 7-day window.

Every window carries the scoring versions of the scans it counted: grades of different versions
are not comparable, and a window that mixes them says so.

Everything is computed in SQL, one grouped query per window for any number of endpoints.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from fractions import Fraction

from django.db.models import Count, F, FilteredRelation, Q
from django.utils import timezone

from scans.grader import scoring
from scans.history import scoped_to_teams
from scans.models import Endpoint, Scan, ScanStatus

__all__ = ["MIN_SCANS", "WINDOW_DAYS", "SloWindow", "TargetResult", "window", "windows_for"]

MIN_SCANS = 5
WINDOW_DAYS = (7, 30)
TTFT_CHECK = "ttft_p95_at_concurrency_1"
ERROR_RATE_CHECK = "error_rate"
LETTERS = scoring.GRADES


@dataclass(frozen=True)
class TargetResult:
    key: str  # "grade", "ttft_p95" or "error_rate"
    label: str  # e.g. "grade B or better"
    met: int
    scans: int

    @property
    def share(self) -> float | None:
        return self.met / self.scans if self.scans else None


@dataclass(frozen=True)
class SloWindow:
    days: int
    scans: int  # succeeded scans counted
    errored: int  # errored scans, left out of the shares
    minimum: int
    targets: tuple[TargetResult, ...]
    met_all: int
    objective: float
    versions: tuple[str, ...]  # scoring versions of the counted scans, sorted

    @property
    def enough(self) -> bool:
        return self.scans >= self.minimum

    @property
    def empty_message(self) -> str:
        """What is missing, for a window without enough scans ('' when there are enough)."""
        if self.enough:
            return ""
        counted = "no scan" if not self.scans else (
            f"{self.scans} scan{'s' if self.scans != 1 else ''}")
        return (f"not enough scans in {self.days} days: {counted}, at least {self.minimum} "
                "needed")

    @property
    def share(self) -> float | None:
        """Share of counted scans meeting every target; None without enough scans."""
        return self.met_all / self.scans if self.enough else None

    @property
    def meets_objective(self) -> bool | None:
        if not self.enough:
            return None
        return Fraction(self.met_all, self.scans) >= _exact(self.objective)

    @property
    def misses(self) -> int:
        return self.scans - self.met_all

    @property
    def budget_scans(self) -> float | None:
        """How many scans of this window may miss the SLO: (1 - objective) x scans."""
        return float(self._budget) if self.enough else None

    @property
    def budget_left_scans(self) -> float | None:
        return float(self._budget - self.misses) if self.enough else None

    @property
    def budget_left(self) -> float | None:
        """What is left of the error budget as a share of it: 1 untouched, 0 spent, below 0
        overspent. None without enough scans, or with an objective of 100% (no budget)."""
        if not self.enough or self._budget == 0:
            return None
        return float((self._budget - self.misses) / self._budget)

    @property
    def mixed_versions(self) -> bool:
        return len(self.versions) > 1

    @property
    def _budget(self) -> Fraction:
        return (1 - _exact(self.objective)) * self.scans


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


def windows_for(endpoints: Iterable[Endpoint], days: int,
                now: datetime | None = None) -> dict[int, SloWindow]:
    """The `days`-day window of each endpoint (keyed by id), in one grouped query.

    The endpoints must be ones the caller was allowed to see (fetched through the scoping
    layer); their scans are read through it too.
    """
    endpoints = list(endpoints)
    if not endpoints:
        return {}
    now = now or timezone.now()
    team_ids = {e.team_id for e in endpoints}
    scans = scoped_to_teams(Scan, team_ids).filter(
        endpoint__in=[e.pk for e in endpoints],
        queued_at__gt=now - timedelta(days=days), queued_at__lte=now,
        status__in=[ScanStatus.SUCCEEDED, ScanStatus.ERRORED],
    )
    counted = Q(status=ScanStatus.SUCCEEDED)
    grade_ok = _grade_ok()
    ttft_ok = _value_ok("ttft", "slo_ttft_p95_ms")
    error_ok = _value_ok("errors", "slo_error_rate")
    # Each scan's two check rows, joined once (LEFT JOIN on the unique (scan, check_id)):
    # far cheaper than a subquery per scan.
    joined = scans.annotate(
        ttft=FilteredRelation("check_results", condition=Q(check_results__check_id=TTFT_CHECK)),
        errors=FilteredRelation("check_results",
                                condition=Q(check_results__check_id=ERROR_RATE_CHECK)),
    )
    rows = {
        r["endpoint_id"]: r
        for r in joined.values("endpoint_id").annotate(
            scans=Count("pk", filter=counted),
            errored=Count("pk", filter=Q(status=ScanStatus.ERRORED)),
            grade_met=Count("pk", filter=counted & grade_ok),
            ttft_met=Count("pk", filter=counted & ttft_ok),
            error_met=Count("pk", filter=counted & error_ok),
            all_met=Count("pk", filter=counted & grade_ok & ttft_ok & error_ok),
        ).order_by()
    }
    versions: dict[int, set[str]] = {}
    for endpoint_id, version in (scans.filter(counted).order_by()
                                 .values_list("endpoint_id", "scoring_version").distinct()):
        versions.setdefault(endpoint_id, set()).add(version)

    result = {}
    for endpoint in endpoints:
        r = rows.get(endpoint.pk, {})
        total = r.get("scans", 0)
        targets = [TargetResult("grade", f"grade {endpoint.slo_grade_floor} or better",
                                r.get("grade_met", 0), total)]
        if endpoint.slo_ttft_p95_ms is not None:
            targets.append(TargetResult(
                "ttft_p95", f"TTFT p95 at concurrency 1 at most {endpoint.slo_ttft_p95_ms:g} ms",
                r.get("ttft_met", 0), total))
        if endpoint.slo_error_rate is not None:
            targets.append(TargetResult(
                "error_rate", f"error rate at most {endpoint.slo_error_rate:.2%}",
                r.get("error_met", 0), total))
        result[endpoint.pk] = SloWindow(
            days=days, scans=total, errored=r.get("errored", 0), minimum=MIN_SCANS,
            targets=tuple(targets), met_all=r.get("all_met", 0),
            objective=endpoint.slo_objective,
            versions=tuple(sorted(versions.get(endpoint.pk, ()))),
        )
    return result


def window(endpoint: Endpoint, days: int, now: datetime | None = None) -> SloWindow:
    """One endpoint's `days`-day window."""
    return windows_for([endpoint], days, now)[endpoint.pk]
