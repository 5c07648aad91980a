"""One check's values over time (the endpoint page's check charts and the check history API),
downsampled as scans/history/downsampling.py says, and why a check went unmeasured.

A check result is placed at its `measured_at` (indexed with endpoint and check id,
"check_history"); values of different scoring versions are never merged into one point.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from datetime import datetime

from django.db.models import (
    Case,
    Count,
    F,
    IntegerField,
    Max,
    Min,
    Q,
    Sum,
    Value,
    When,
)

from scans.endpoints import profile as load_profile
from scans.grader import CHECKS, INSUFFICIENT_EVIDENCE
from scans.history import rollups
from scans.history.downsampling import (
    DEFAULT_MAX_POINTS,
    PROFILE_NAMES,
    TimeBucket,
    as_float,
    bucket_width_s,
    check_max_points,
    graded_scans,
    profile_fields,
    range_bounds,
    rolled_buckets,
    series_count,
    series_count_with_rollups,
)
from scans.models import CheckResult, Endpoint

__all__ = ["CheckPoint", "check_history", "unmeasured_reasons"]

# Worst first: the status a bucket shows is the worst of the statuses it holds.
_STATUS_ORDER = ("fail", "warn", "pass", INSUFFICIENT_EVIDENCE, "preview")
_CHECK_SUMS = ("scans", "vsum", "vn", "passed", "warned", "failed", "unmeasured", "insufficient")


@dataclass(frozen=True)
class CheckPoint:
    """One point of a check's history: one scan's value, or a bucket of them.

    - `value`: the measured value (a boolean check reads 1.0 present / 0.0 absent), or the mean
      of the measured values in the bucket; None when nothing in it was measured.
    - `status`: the scan's status, or the worst in the bucket (fail, warn, pass, then
      insufficient_evidence, preview).
    - `passed` / `warned` / `failed` / `unmeasured`: how many of its scans had each status
      (`unmeasured` counts insufficient_evidence and preview alike).
    """

    at: datetime
    last_at: datetime
    scans: int
    value: float | None
    value_min: float | None
    value_max: float | None
    status: str
    passed: int
    warned: int
    failed: int
    unmeasured: int
    scoring_version: str
    scan_id: uuid.UUID | None = None
    profile: str = ""
    profile_key: str = ""
    #: The URL the scan reached, as GradePoint.url: a change breaks the check's line too.
    url: str = ""
    #: What the server said of itself, as GradePoint.server.
    server: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


def check_history(endpoint: Endpoint, check_id: str, since: datetime | None = None,
                  until: datetime | None = None,
                  max_points: int = DEFAULT_MAX_POINTS,
                  location: str | None = None) -> list[CheckPoint]:
    """One check's values for `endpoint` between `since` and `until` (inclusive), oldest first.

    `endpoint` must be one the caller was allowed to see (fetched through the scoping layer);
    `check_id` one of `scans.grader.CHECKS` (ValueError otherwise, e.g. a 400 in the API).
    At most `max_points` points: one per scan when they fit, else time buckets computed in SQL,
    each with the mean/min/max of the measured values and the count of each status. Every
    point carries its `scoring_version`: thresholds may differ between versions, so values of
    different versions are never merged into one point. `since` None means from the first
    value; `until` None, now. Use `CheckPoint.as_dict()` to serialize.
    """
    check_max_points(max_points)
    if check_id not in {c.id for c in CHECKS}:
        known = ", ".join(c.id for c in CHECKS)
        raise ValueError(f"unknown check {check_id!r}: expected one of {known}")
    results = CheckResult.objects.for_team(endpoint.team_id).filter(endpoint=endpoint,
                                                                     check_id=check_id)
    if location:
        results = results.filter(scan__location=location)
    since, until = range_bounds(since, until,
                           lambda: results.aggregate(t=Min("measured_at"))["t"])
    in_range = results.filter(measured_at__gte=since, measured_at__lte=until)
    rows = in_range.annotate(**load_profile.plan_columns("scan__"),
                             target_url=F("scan__target_url"))
    if in_range.count() <= max_points:  # counted without the join to the scans
        return [
            CheckPoint(
                at=r["measured_at"], last_at=r["measured_at"], scans=1, value=r["value"],
                value_min=r["value"], value_max=r["value"], status=r["status"],
                passed=int(r["status"] == "pass"), warned=int(r["status"] == "warn"),
                failed=int(r["status"] == "fail"),
                unmeasured=int(r["status"] not in ("pass", "warn", "fail")),
                scoring_version=r["scoring_version"], scan_id=r["scan__public_id"],
                url=r["target_url"] or "", server=r["scan__server_label"],
                **profile_fields(r),
            )
            for r in rows.order_by("measured_at", "pk").values(
                "measured_at", "value", "status", "scoring_version", "scan__public_id",
                "target_url", "scan__server_label", *PROFILE_NAMES)
        ]
    names = [*PROFILE_NAMES, "target_url"]  # a bucket never mixes versions, loads or URLs
    span = rollups.long_range(since, until, bucket_width_s(since, until, max_points))
    rolled: list[dict] = []
    if span is None:
        width = bucket_width_s(since, until, max_points // series_count(rows, names))
    else:
        since = span.since
        rows = results.filter(measured_at__gte=max(since, span.rolled_until),
                              measured_at__lte=until).annotate(
            **load_profile.plan_columns("scan__"), target_url=F("scan__target_url"))
        rolled_rows = span.check_rollups(endpoint, check_id, location)
        width = span.width(max_points // series_count_with_rollups(rows, rolled_rows, names))
        rolled = _rolled_checks(rolled_rows, since, width)

    def count(status_q: Q):
        return Sum(Case(When(status_q, then=Value(1)), default=Value(0),
                        output_field=IntegerField()))

    bucketed = (
        rows.annotate(bucket=TimeBucket("measured_at", since.timestamp(), width))
        .values("bucket", "scoring_version", *names)
        .annotate(
            at=Min("measured_at"), last_at=Max("measured_at"), scans=Count("pk"),
            vsum=Sum("value"), vn=Count("value"), low=Min("value"), high=Max("value"),
            passed=count(Q(status="pass")), warned=count(Q(status="warn")),
            failed=count(Q(status="fail")),
            unmeasured=count(~Q(status__in=["pass", "warn", "fail"])),
            insufficient=count(Q(status=INSUFFICIENT_EVIDENCE)),
        )
        .order_by("bucket", "at")
    )
    points = []
    for r in rollups.merge([*bucketed, *rolled], sums=_CHECK_SUMS, mins=("low",), maxes=("high",)):
        counts = {"fail": r["failed"], "warn": r["warned"], "pass": r["passed"],
                  INSUFFICIENT_EVIDENCE: r["insufficient"],
                  "preview": r["unmeasured"] - r["insufficient"]}
        status = next(s for s in _STATUS_ORDER if counts[s]) if r["scans"] else "preview"
        points.append(CheckPoint(
            at=r["at"], last_at=r["last_at"], scans=r["scans"],
            value=as_float(r["vsum"] / r["vn"] if r["vn"] else None),
            value_min=as_float(r["low"]), value_max=as_float(r["high"]), status=status,
            passed=r["passed"], warned=r["warned"], failed=r["failed"],
            unmeasured=r["unmeasured"], scoring_version=r["scoring_version"],
            url=r["target_url"] or "", **profile_fields(r),
        ))
    return points


def unmeasured_reasons(endpoint: Endpoint, check_id: str,
                       scan_ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, str]:
    """Why a check was not measured in each of these scans (report.json's `reason`, kept on
    its check row), for the charts' hover text."""
    scan_ids = list(scan_ids)
    if not scan_ids:
        return {}
    graded = graded_scans(endpoint).filter(public_id__in=scan_ids).values("pk")
    return dict(CheckResult.objects.for_team(endpoint.team_id)
                .filter(scan__in=graded, check_id=check_id).exclude(reason="")
                .values_list("scan__public_id", "reason"))


def _rolled_checks(rolled, since: datetime, width: int) -> list[dict]:
    return rolled_buckets(
        rolled, since, width, vsum=Sum("value_sum"), vn=Sum("value_n"), low=Min("value_min"),
        high=Max("value_max"), passed=Sum("passed"), warned=Sum("warned"),
        failed=Sum("failed"), unmeasured=Sum("unmeasured"), insufficient=Sum("insufficient"))
