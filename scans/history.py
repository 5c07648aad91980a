"""An endpoint's grades and check values over time, for charts, sparklines and the history API.

Long ranges are downsampled in SQL, never in Python: when a range holds more rows than
`max_points`, the rows are grouped into equal time buckets by an expression the database
computes (seconds since `since`, divided by the bucket width), and each bucket becomes one
point carrying the mean, min and max and the count of scans it stands for.

Rows of different scoring versions are never merged: the grouping is by (bucket, version), so a
bucket that straddles a version change yields one point per version, and every point carries
its `scoring_version` (grades of different versions are not comparable). To keep the promise
of at most `max_points` points even then, the number of buckets is `max_points` divided by the
number of versions present in the range (one version, the usual case: all of `max_points`).

Times: a scan is placed at its `queued_at` (indexed with its endpoint, "scan_endpoint_time");
a check result at its `measured_at` (indexed with endpoint and check id, "check_history").
Only succeeded scans have grades and check rows; errored scans are not part of any history.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta

from django.db.models import (
    Avg,
    BigIntegerField,
    Case,
    Count,
    F,
    FloatField,
    Func,
    IntegerField,
    Max,
    Min,
    OuterRef,
    Q,
    Sum,
    Value,
    When,
)
from django.db.models.fields.json import KT, KeyTransform
from django.db.models.functions import Cast, Coalesce
from django.utils import timezone

from accounts.tenancy import scoped_to_teams
from scans import profile as load_profile
from scans import rollups
from scans.grader import scoring
from scans.models import CheckResult, Endpoint, Scan, ScanStatus

__all__ = [
    "DEFAULT_MAX_POINTS",
    "HEADLINE_FIGURES",
    "CapacityPoint",
    "CheckPoint",
    "GradePoint",
    "HeadlinePoint",
    "capacity_history",
    "check_history",
    "grade_history",
    "headline_history",
    "latest_capacity",
    "latest_grades",
    "unmeasured_reasons",
]

DEFAULT_MAX_POINTS = 200
LETTERS = scoring.GRADES
# Worst first: the status a bucket shows is the worst of the statuses it holds.
_STATUS_ORDER = ("fail", "warn", "pass", scoring.INSUFFICIENT_EVIDENCE, "preview")


class _TimeBucket(Func):
    """floor((epoch seconds of `expression`) - since_epoch) / width): the bucket index.

    Written in PostgreSQL's terms (EXTRACT(EPOCH …)): Django exposes no portable "seconds
    since the epoch". Rows are filtered to [since, until], so the dividend is never negative.
    """

    output_field = BigIntegerField()

    def __init__(self, expression, since_epoch: float, width_s: int):
        super().__init__(expression, Value(float(since_epoch)), Value(float(width_s)))

    def as_sql(self, compiler, connection, function=None, template=None, arg_joiner=None,
               **extra_context):
        field_sql, field_params = compiler.compile(self.source_expressions[0])
        since_sql, since_params = compiler.compile(self.source_expressions[1])
        width_sql, width_params = compiler.compile(self.source_expressions[2])
        sql = (f"FLOOR((EXTRACT(EPOCH FROM {field_sql}) - {since_sql}) / {width_sql})"
               f"::bigint")
        return sql, (*field_params, *since_params, *width_params)


@dataclass(frozen=True)
class GradePoint:
    """One point of a grade history: one scan, or (downsampled) a bucket of scans.

    - `at` / `last_at`: the scan's time, or the first and last scan times in the bucket.
    - `scans`: how many succeeded scans the point stands for (1 when not downsampled).
    - `points`: the scan's points, or the mean over the bucket's scans that have a letter;
      None when none has (a scan graded insufficient_evidence has no points).
    - `grade`: the scan's grade, or the worst in the bucket ("insufficient_evidence", no
      letter, counts as the worst of all, as it does against an SLO floor).
    - `uncapped_grade`: the band the points earned (one scan only; "" for a bucket).
    - `capped`: how many of its scans a cap bound (grade worse than the uncapped grade).
    - `caps`: the ids of the caps that applied (one scan only; () for a bucket).
    - `no_letter`: how many of its scans have no letter (insufficient_evidence, or down).
    - `down`: how many of its scans were down (the endpoint never answered): down is a state,
      not a grade, so such a scan has no letter and no points and is a gap on the grade line.
    - `scan_id`: the scan's public id (one scan only; None for a bucket).
    """

    at: datetime
    last_at: datetime
    scans: int
    points: float | None
    points_min: float | None
    points_max: float | None
    grade: str
    uncapped_grade: str
    capped: int
    caps: tuple[str, ...]
    no_letter: int
    scoring_version: str
    provisional: bool
    scan_id: uuid.UUID | None = None
    #: The load the scan ran (report.plan, scans/profile.py): grades of different loads are
    #: not comparable either, so charts break where `profile_key` changes.
    profile: str = ""
    profile_key: str = ""
    down: int = 0
    #: The URL the scan reached (report.target.base_url): a change is another server, so
    #: charts break there too and mark it "new URL".
    url: str = ""

    @property
    def has_letter(self) -> bool:
        return self.grade in LETTERS

    def as_dict(self) -> dict:
        return asdict(self)


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

    def as_dict(self) -> dict:
        return asdict(self)


# --- helpers ---------------------------------------------------------------------------------


def _window(since: datetime | None, until: datetime | None, earliest) -> tuple[datetime, datetime]:
    until = until or timezone.now()
    if since is None:
        since = earliest() or until
    return since, until


def _bucket_width_s(since: datetime, until: datetime, buckets: int) -> int:
    """Whole seconds per bucket, so that a row at exactly `until` still falls in the last one."""
    span = max(0.0, (until - since).total_seconds())
    return max(1, math.ceil((span + 1) / max(1, buckets)))


def _versions(rows, profile_names: Iterable[str] = ()) -> int:
    """How many series the range holds: scoring versions × loads (each is bucketed apart)."""
    return max(1, rows.values("scoring_version", *profile_names).distinct().count())


_PROFILE_NAMES = [f"pf_{name}" for name in load_profile.PLAN_PATHS]


def _profile_fields(row) -> dict:
    loaded = load_profile.profile_of_row(row)
    return {"profile": loaded.label, "profile_key": loaded.key}


def _check_max_points(max_points: int) -> None:
    if max_points < 1:
        raise ValueError(f"max_points must be at least 1, got {max_points!r}")


# --- grades ----------------------------------------------------------------------------------


def _graded_scans(endpoint: Endpoint, location: str | None = None):
    # The caller holds an endpoint it was allowed to see; its rows are read through the scoped
    # manager, narrowed to that endpoint's team and then to the endpoint itself (and to one
    # scan location when asked: an endpoint scanned from two places has two histories).
    scans = Scan.objects.for_team(endpoint.team_id).filter(
        endpoint=endpoint, status=ScanStatus.SUCCEEDED)
    return scans.filter(location=location) if location else scans


def grade_history(endpoint: Endpoint, since: datetime | None = None, until: datetime | None = None,
                  max_points: int = DEFAULT_MAX_POINTS,
                  location: str | None = None) -> list[GradePoint]:
    """The endpoint's grades between `since` and `until` (inclusive), oldest first.

    `endpoint` must be one the caller was allowed to see (fetched through the scoping layer).
    At most `max_points` points: one per scan when they fit, else time buckets computed in SQL
    (see the module docstring). `since` None means from the first scan; `until` None, now.
    """
    _check_max_points(max_points)
    scans = _graded_scans(endpoint, location)
    since, until = _window(since, until, lambda: scans.aggregate(t=Min("queued_at"))["t"])
    # The load and URL from their columns (never the reports: a list of them would read each).
    rows = scans.filter(queued_at__gte=since, queued_at__lte=until).annotate(
        **load_profile.plan_columns())
    if rows.count() <= max_points:
        return [
            GradePoint(
                at=r["queued_at"], last_at=r["queued_at"], scans=1,
                points=_float(r["points"]), points_min=_float(r["points"]),
                points_max=_float(r["points"]), grade=r["grade"],
                uncapped_grade=r["uncapped_grade"],
                capped=int(_is_capped(r["grade"], r["uncapped_grade"])),
                caps=tuple(c.get("id", "") for c in (r["caps"] or []) if isinstance(c, dict)),
                no_letter=int(r["grade"] not in LETTERS),
                scoring_version=r["scoring_version"], provisional=r["provisional"],
                scan_id=r["public_id"], down=int(r["down"]), url=r["target_url"] or "",
                **_profile_fields(r),
            )
            for r in rows.order_by("queued_at").values(
                "queued_at", "points", "grade", "uncapped_grade", "scoring_version",
                "provisional", "public_id", "down", "target_url", *_PROFILE_NAMES,
                caps=F("report__score__caps_applied"))
        ]
    names = [*_PROFILE_NAMES, "target_url"]  # a bucket never mixes versions, loads or URLs
    # An hour or wider: whole hours (days), read from the rollups as far as they are complete.
    span = rollups.long_range(since, until, _bucket_width_s(since, until, max_points))
    rolled: list[dict] = []
    if span is None:
        width = _bucket_width_s(since, until, max_points // _versions(rows, names))
    else:
        since = span.since
        rows = _widened(rows, scans, queued_at__gte=max(since, span.rolled_until),
                        queued_at__lte=until)
        rolled_rows = span.scan_rollups(endpoint, location)
        width = span.width(max_points // _series(rows, rolled_rows, names))
        rolled = _rolled_grades(rolled_rows, since, width)
    bucketed = (
        rows.annotate(bucket=_TimeBucket("queued_at", since.timestamp(), width))
        .values("bucket", "scoring_version", *names)
        .annotate(
            at=Min("queued_at"), last_at=Max("queued_at"), scans=Count("pk"),
            psum=Sum("points"), pn=Count("points"), low=Min("points"), high=Max("points"),
            # Letters sort A < B < … < F < "insufficient_evidence": Max is the worst grade.
            worst=Max("grade"),
            capped=Sum(Case(When(~Q(uncapped_grade="") & _capped_q(), then=Value(1)),
                            default=Value(0), output_field=IntegerField())),
            no_letter=Sum(Case(When(~Q(grade__in=LETTERS), then=Value(1)),
                               default=Value(0), output_field=IntegerField())),
            # PostgreSQL has no max(boolean); an integer cast works everywhere.
            provisional_any=Max(Cast("provisional", IntegerField())),
            down=Sum(Cast("down", IntegerField())),
        )
        .order_by("bucket", "at")
    )
    merged = rollups.merge([*bucketed, *rolled], sums=_GRADE_SUMS, mins=("low",),
                           maxes=("high", "worst", "provisional_any"))
    return [
        GradePoint(
            at=r["at"], last_at=r["last_at"], scans=r["scans"],
            points=_float(r["psum"] / r["pn"] if r["pn"] else None, 1),
            points_min=_float(r["low"]), points_max=_float(r["high"]), grade=r["worst"],
            uncapped_grade="", capped=r["capped"] or 0, caps=(), no_letter=r["no_letter"] or 0,
            scoring_version=r["scoring_version"], provisional=bool(r["provisional_any"]),
            down=r["down"] or 0, url=r["target_url"] or "", **_profile_fields(r),
        )
        for r in merged
    ]


def _capped_q() -> Q:
    """A cap bound the grade: the grade is a worse letter than the uncapped band, or there is
    no letter while points were earned (cannot happen under 0.9.0, kept for safety)."""
    worse = Q()
    for i, uncapped in enumerate(LETTERS):
        worse |= Q(uncapped_grade=uncapped, grade__in=LETTERS[i + 1:])
    return worse


def _is_capped(grade: str, uncapped: str) -> bool:
    return (grade in LETTERS and uncapped in LETTERS
            and LETTERS.index(grade) > LETTERS.index(uncapped))


def _float(value, digits: int | None = None) -> float | None:
    if value is None:
        return None
    return round(float(value), digits) if digits is not None else float(value)


_LATEST_FIELDS = ("endpoint_id", "queued_at", "points", "grade", "uncapped_grade",
                  "scoring_version", "provisional", "public_id", "down", "target_url")


def _latest_rows_postgresql(endpoints, team_ids, n: int):
    """On PostgreSQL: an ARRAY(subquery … LIMIT n) per endpoint, each read off the
    (endpoint, -queued_at) index, instead of numbering every scan of every endpoint."""
    from django.contrib.postgres.expressions import ArraySubquery
    from django.db.models.functions import JSONObject

    newest = (
        scoped_to_teams(Scan, team_ids)
        .filter(endpoint_id=OuterRef("pk"), status=ScanStatus.SUCCEEDED)
        .order_by("-queued_at", "-pk")
        .values(row=JSONObject(**{f: f for f in _LATEST_FIELDS},
                               **load_profile.plan_columns()))[:n]
    )
    per_endpoint = (
        scoped_to_teams(Endpoint, team_ids).filter(pk__in=[e.pk for e in endpoints])
        .annotate(latest=ArraySubquery(newest)).values_list("latest", flat=True)
    )
    for latest in per_endpoint:
        for row in latest:
            yield {**row, "queued_at": datetime.fromisoformat(row["queued_at"]),
                   "public_id": uuid.UUID(row["public_id"])}


def latest_grades(endpoints: Iterable[Endpoint], n: int = 30) -> dict[int, list[GradePoint]]:
    """The last `n` succeeded scans of each endpoint, oldest first, keyed by endpoint id.

    One query for all endpoints (no N+1): an array subquery per endpoint reads its newest `n`
    scans off the index. Endpoints without a scan map to [].
    """
    endpoints = list(endpoints)
    result: dict[int, list[GradePoint]] = {e.pk: [] for e in endpoints}
    if not endpoints or n < 1:
        return result
    team_ids = {e.team_id for e in endpoints}
    rows = _latest_rows_postgresql(endpoints, team_ids, n)
    for r in rows:
        points = _float(r["points"])
        result[r["endpoint_id"]].append(GradePoint(
            at=r["queued_at"], last_at=r["queued_at"], scans=1, points=points,
            points_min=points, points_max=points, grade=r["grade"],
            uncapped_grade=r["uncapped_grade"],
            capped=int(_is_capped(r["grade"], r["uncapped_grade"])), caps=(),
            no_letter=int(r["grade"] not in LETTERS), scoring_version=r["scoring_version"],
            provisional=r["provisional"], scan_id=r["public_id"], down=int(r["down"]),
            url=r.get("target_url") or "", **_profile_fields(r),
        ))
    for series in result.values():
        series.sort(key=lambda p: p.at)
    return result


# --- checks ----------------------------------------------------------------------------------


def check_history(endpoint: Endpoint, check_id: str, since: datetime | None = None,
                  until: datetime | None = None,
                  max_points: int = DEFAULT_MAX_POINTS,
                  location: str | None = None) -> list[CheckPoint]:
    """One check's values for `endpoint` between `since` and `until` (inclusive), oldest first.

    `endpoint` must be one the caller was allowed to see (fetched through the scoping layer);
    `check_id` one of `scans.grader.scoring.CHECKS` (ValueError otherwise, e.g. a 400 in the API).
    At most `max_points` points: one per scan when they fit, else time buckets computed in SQL,
    each with the mean/min/max of the measured values and the count of each status. Every
    point carries its `scoring_version`: thresholds may differ between versions, so values of
    different versions are never merged into one point. `since` None means from the first
    value; `until` None, now. Use `CheckPoint.as_dict()` to serialize.
    """
    _check_max_points(max_points)
    if check_id not in {c.id for c in scoring.CHECKS}:
        known = ", ".join(c.id for c in scoring.CHECKS)
        raise ValueError(f"unknown check {check_id!r}: expected one of {known}")
    results = CheckResult.objects.for_team(endpoint.team_id).filter(endpoint=endpoint,
                                                                     check_id=check_id)
    if location:
        results = results.filter(scan__location=location)
    since, until = _window(since, until,
                           lambda: results.aggregate(t=Min("measured_at"))["t"])
    rows = results.filter(measured_at__gte=since, measured_at__lte=until).annotate(
        **load_profile.plan_columns("scan__"), target_url=F("scan__target_url"))
    if rows.count() <= max_points:
        return [
            CheckPoint(
                at=r["measured_at"], last_at=r["measured_at"], scans=1, value=r["value"],
                value_min=r["value"], value_max=r["value"], status=r["status"],
                passed=int(r["status"] == "pass"), warned=int(r["status"] == "warn"),
                failed=int(r["status"] == "fail"),
                unmeasured=int(r["status"] not in ("pass", "warn", "fail")),
                scoring_version=r["scoring_version"], scan_id=r["scan__public_id"],
                url=r["target_url"] or "", **_profile_fields(r),
            )
            for r in rows.order_by("measured_at", "pk").values(
                "measured_at", "value", "status", "scoring_version", "scan__public_id",
                "target_url", *_PROFILE_NAMES)
        ]
    names = [*_PROFILE_NAMES, "target_url"]  # a bucket never mixes versions, loads or URLs
    span = rollups.long_range(since, until, _bucket_width_s(since, until, max_points))
    rolled: list[dict] = []
    if span is None:
        width = _bucket_width_s(since, until, max_points // _versions(rows, names))
    else:
        since = span.since
        rows = results.filter(measured_at__gte=max(since, span.rolled_until),
                              measured_at__lte=until).annotate(
            **load_profile.plan_columns("scan__"), target_url=F("scan__target_url"))
        rolled_rows = span.check_rollups(endpoint, check_id, location)
        width = span.width(max_points // _series(rows, rolled_rows, names))
        rolled = _rolled_checks(rolled_rows, since, width)

    def count(status_q: Q):
        return Sum(Case(When(status_q, then=Value(1)), default=Value(0),
                        output_field=IntegerField()))

    bucketed = (
        rows.annotate(bucket=_TimeBucket("measured_at", since.timestamp(), width))
        .values("bucket", "scoring_version", *names)
        .annotate(
            at=Min("measured_at"), last_at=Max("measured_at"), scans=Count("pk"),
            vsum=Sum("value"), vn=Count("value"), low=Min("value"), high=Max("value"),
            passed=count(Q(status="pass")), warned=count(Q(status="warn")),
            failed=count(Q(status="fail")),
            unmeasured=count(~Q(status__in=["pass", "warn", "fail"])),
            insufficient=count(Q(status=scoring.INSUFFICIENT_EVIDENCE)),
        )
        .order_by("bucket", "at")
    )
    points = []
    for r in rollups.merge([*bucketed, *rolled], sums=_CHECK_SUMS, mins=("low",), maxes=("high",)):
        counts = {"fail": r["failed"], "warn": r["warned"], "pass": r["passed"],
                  scoring.INSUFFICIENT_EVIDENCE: r["insufficient"],
                  "preview": r["unmeasured"] - r["insufficient"]}
        status = next(s for s in _STATUS_ORDER if counts[s]) if r["scans"] else "preview"
        points.append(CheckPoint(
            at=r["at"], last_at=r["last_at"], scans=r["scans"],
            value=_float(r["vsum"] / r["vn"] if r["vn"] else None),
            value_min=_float(r["low"]), value_max=_float(r["high"]), status=status,
            passed=r["passed"], warned=r["warned"], failed=r["failed"],
            unmeasured=r["unmeasured"], scoring_version=r["scoring_version"],
            url=r["target_url"] or "", **_profile_fields(r),
        ))
    return points


def default_since(days: int = 90, now: datetime | None = None) -> datetime:
    """The start of the default chart range: the last `days` days."""
    return (now or timezone.now()) - timedelta(days=days)


# --- headline numbers and reasons ------------------------------------------------------------

# The headline figures the endpoint page draws over time, read from each report's first level
# (one request at a time): where in report.json each one lives.
HEADLINE_FIGURES = {
    "ttft_p50": "report__levels__0__ttft_ms__p50",
    "ttft_p95": "report__levels__0__ttft_ms__p95",
    "tokens_per_s": "report__levels__0__generation_rate__median",
}


@dataclass(frozen=True)
class HeadlinePoint:
    """One scan's headline figures (keys of HEADLINE_FIGURES; None where not measured), or the
    means over a bucket of scans (downsampled as grade_history is)."""

    at: datetime
    last_at: datetime
    scans: int
    figures: dict[str, float | None]
    scan_id: uuid.UUID | None = None


def headline_history(endpoint: Endpoint, since: datetime, until: datetime,
                     max_points: int = DEFAULT_MAX_POINTS,
                     location: str | None = None) -> list[HeadlinePoint]:
    """The endpoint's headline figures between `since` and `until`, oldest first; each figure
    is extracted from report.json in SQL (the reports themselves are never loaded)."""
    _check_max_points(max_points)
    rows = _graded_scans(endpoint, location).filter(queued_at__gte=since, queued_at__lte=until)
    figures = {key: Cast(KT(path), FloatField()) for key, path in HEADLINE_FIGURES.items()}
    if rows.count() <= max_points:
        return [
            HeadlinePoint(at=r["queued_at"], last_at=r["queued_at"], scans=1,
                          figures={key: _float(r[key]) for key in figures},
                          scan_id=r["public_id"])
            for r in rows.order_by("queued_at").values("queued_at", "public_id", **figures)
        ]
    width = _bucket_width_s(since, until, max_points)
    span = rollups.long_range(since, until, width)
    rolled: list[dict] = []
    if span is not None:
        since, width = span.since, span.width(max_points)
        rows = _graded_scans(endpoint, location).filter(
            queued_at__gte=max(since, span.rolled_until), queued_at__lte=until)
        rolled = _rolled_headlines(span.scan_rollups(endpoint, location), since, width)
    bucketed = (
        rows.annotate(bucket=_TimeBucket("queued_at", since.timestamp(), width), **figures)
        .values("bucket")
        .annotate(at=Min("queued_at"), last_at=Max("queued_at"), scans=Count("pk"),
                  **{f"sum_{key}": Sum(key) for key in figures},
                  **{f"n_{key}": Count(key) for key in figures})
        .order_by("bucket")
    )
    sums = ["scans", *(f"{part}_{key}" for key in figures for part in ("sum", "n"))]
    merged = rollups.merge([*bucketed, *rolled], sums=sums, key=lambda r: r["bucket"])
    return [HeadlinePoint(at=r["at"], last_at=r["last_at"], scans=r["scans"],
                          figures={key: _float(r[f"sum_{key}"] / r[f"n_{key}"]
                                               if r[f"n_{key}"] else None, 1)
                                   for key in figures})
            for r in merged]


def unmeasured_reasons(endpoint: Endpoint, check_id: str,
                       scan_ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, str]:
    """Why a check was not measured in each of these scans (report.json's `reason`), for the
    charts' hover text. Only the reports' checks lists are read, and only for these scans."""
    scan_ids = list(scan_ids)
    if not scan_ids:
        return {}
    reasons = {}
    for row in _graded_scans(endpoint).filter(public_id__in=scan_ids).values(
            "public_id", checks=F("report__checks")):
        for check in row["checks"] or []:
            if isinstance(check, dict) and check.get("id") == check_id and check.get("reason"):
                reasons[row["public_id"]] = str(check["reason"])
    return reasons


# --- capacity within the SLO (issue 22) ------------------------------------------------------


@dataclass(frozen=True)
class CapacityPoint:
    """One scan's capacity search (the scans that did not search are not part of it), or a
    bucket of them (downsampled as grade_history is).

    - `streams`: concurrent streams served within the SLO: the capacity, 0 when no level met
      it; a bucket's mean (`streams_min`, `streams_max` its range).
    - `concurrency`: the scan's capacity as report.json has it, None when no level met the SLO
      (one scan only; None for a bucket).
    - `outcome`: "met", "none_met" (no level met the SLO) or "met_at_highest" (the highest level
      tried met it: the capacity may be higher); "" for a bucket, which counts `none_met` and
      `met_at_highest` instead.
    - `requests_per_s`, `output_tokens_per_s` (`output_unit`): goodput at the capacity (a
      bucket's means).
    - `slo`: the objective searched against (report.json's capacity.slo); buckets never merge
      two objectives.
    - `pushed`: how many of its scans were pushed reports (their searched levels are not
      proven from samples).
    """

    at: datetime
    last_at: datetime
    scans: int
    streams: float
    streams_min: float
    streams_max: float
    concurrency: int | None
    outcome: str
    none_met: int
    met_at_highest: int
    requests_per_s: float | None
    output_tokens_per_s: float | None
    output_unit: str
    slo: dict | None
    pushed: int
    scan_id: uuid.UUID | None = None

    def as_dict(self) -> dict:
        return asdict(self)


def _searched_scans(endpoint: Endpoint, location: str | None = None):
    # Read through the endpoint's team like _graded_scans; the partial index
    # scan_capacity_history holds exactly these rows.
    return _graded_scans(endpoint, location).exclude(capacity_outcome="")


def latest_capacity(endpoint: Endpoint) -> Scan | None:
    """The endpoint's latest scan that searched for its capacity (the page's "serves up to N
    concurrent streams"), or None. Its report is not loaded: `capacity_found` holds the
    report's capacity section (reason, levels tried, SLO)."""
    return (_searched_scans(endpoint).order_by("-queued_at", "-pk").defer("report")
            .annotate(capacity_found=KeyTransform("capacity", "report")).first())


def capacity_history(endpoint: Endpoint, since: datetime | None = None,
                     until: datetime | None = None, max_points: int = DEFAULT_MAX_POINTS,
                     location: str | None = None) -> list[CapacityPoint]:
    """The capacity found by each scan that searched, between `since` and `until`, oldest
    first; at most `max_points` (time buckets computed in SQL beyond that, one series per SLO
    objective)."""
    _check_max_points(max_points)
    scans = _searched_scans(endpoint, location)
    since, until = _window(since, until, lambda: scans.aggregate(t=Min("queued_at"))["t"])
    streams = Coalesce("capacity_concurrency", Value(0))
    rows = scans.filter(queued_at__gte=since, queued_at__lte=until).annotate(
        slo=KeyTransform("slo", KeyTransform("capacity", "report")))
    if rows.count() <= max_points:
        return [
            CapacityPoint(
                at=r["queued_at"], last_at=r["queued_at"], scans=1,
                streams=float(r["capacity_concurrency"] or 0),
                streams_min=float(r["capacity_concurrency"] or 0),
                streams_max=float(r["capacity_concurrency"] or 0),
                concurrency=r["capacity_concurrency"], outcome=r["capacity_outcome"],
                none_met=int(r["capacity_outcome"] == "none_met"),
                met_at_highest=int(r["capacity_outcome"] == "met_at_highest"),
                requests_per_s=r["capacity_requests_per_s"],
                output_tokens_per_s=r["capacity_output_tokens_per_s"],
                output_unit=r["capacity_output_unit"],
                slo=r["slo"] if isinstance(r["slo"], dict) else None,
                pushed=int(r["pushed"]), scan_id=r["public_id"],
            )
            for r in rows.order_by("queued_at", "pk").values(
                "queued_at", "public_id", "pushed", "slo", "capacity_outcome",
                "capacity_concurrency", "capacity_requests_per_s",
                "capacity_output_tokens_per_s", "capacity_output_unit")
        ]
    series = max(1, rows.values("slo").distinct().count())
    width = _bucket_width_s(since, until, max_points // series)

    def count(outcome: str):
        return Sum(Case(When(capacity_outcome=outcome, then=Value(1)), default=Value(0),
                        output_field=IntegerField()))

    bucketed = (
        rows.annotate(bucket=_TimeBucket("queued_at", since.timestamp(), width),
                      streams=streams)
        .values("bucket", "slo")
        .annotate(
            at=Min("queued_at"), last_at=Max("queued_at"), count=Count("pk"),
            mean=Avg("streams", output_field=FloatField()), low=Min("streams"),
            high=Max("streams"), none_met=count("none_met"),
            met_at_highest=count("met_at_highest"),
            rps=Avg("capacity_requests_per_s"), out=Avg("capacity_output_tokens_per_s"),
            unit=Max("capacity_output_unit"), pushed_count=Sum(Cast("pushed", IntegerField())),
        )
        .order_by("bucket", "at")
    )
    return [
        CapacityPoint(
            at=r["at"], last_at=r["last_at"], scans=r["count"],
            streams=round(float(r["mean"] or 0), 1), streams_min=float(r["low"] or 0),
            streams_max=float(r["high"] or 0), concurrency=None, outcome="",
            none_met=r["none_met"] or 0, met_at_highest=r["met_at_highest"] or 0,
            requests_per_s=_float(r["rps"], 3), output_tokens_per_s=_float(r["out"], 3),
            output_unit=r["unit"] or "", slo=r["slo"] if isinstance(r["slo"], dict) else None,
            pushed=r["pushed_count"] or 0,
        )
        for r in bucketed
    ]


# --- rollups (scans/rollups.py): long ranges read hours and days, not scans ------------------

_GRADE_SUMS = ("scans", "psum", "pn", "capped", "no_letter", "down")
_CHECK_SUMS = ("scans", "vsum", "vn", "passed", "warned", "failed", "unmeasured", "insufficient")


def _widened(rows, base, **lookups):
    """`base` narrowed by `lookups`, carrying the annotations `rows` carries (the same SQL):
    the raw rows of a range laid on whole hours, from the hour the rollups end."""
    return base.filter(**lookups).annotate(**dict(rows.query.annotations))


def _series(rows, rolled, names: list[str]) -> int:
    """How many series (version × load × URL) the raw rows and the rollup rows hold together."""
    keys = {rollups.group_key(r, bucket=False)
            for r in rows.values("scoring_version", *names).distinct()}
    keys |= {rollups.group_key({**r, **rollups.rolled_plan(r)}, bucket=False)
             for r in rolled.values("scoring_version", "plan", "target_url").distinct()}
    return max(1, len(keys))


def _rolled_buckets(rolled, since: datetime, width: int, **aggregates) -> list[dict]:
    rows = (rolled.annotate(bucket=_TimeBucket("bucket_start", since.timestamp(), width))
            .values("bucket", "scoring_version", "plan", "target_url")
            .annotate(at=Min("first_at"), last_at=Max("last_at"), scans=Sum("scans"),
                      **aggregates))
    return [{**r, **rollups.rolled_plan(r)} for r in rows]


def _rolled_grades(rolled, since: datetime, width: int) -> list[dict]:
    return _rolled_buckets(
        rolled, since, width, psum=Sum("points_sum"), pn=Sum("points_n"),
        low=Min("points_min"), high=Max("points_max"), worst=Max("worst_grade"),
        capped=Sum("capped"), no_letter=Sum("no_letter"),
        provisional_any=Max("provisional"), down=Sum("down"))


def _rolled_checks(rolled, since: datetime, width: int) -> list[dict]:
    return _rolled_buckets(
        rolled, since, width, vsum=Sum("value_sum"), vn=Sum("value_n"), low=Min("value_min"),
        high=Max("value_max"), passed=Sum("passed"), warned=Sum("warned"),
        failed=Sum("failed"), unmeasured=Sum("unmeasured"), insufficient=Sum("insufficient"))


def _rolled_headlines(rolled, since: datetime, width: int) -> list[dict]:
    rows = (rolled.annotate(bucket=_TimeBucket("bucket_start", since.timestamp(), width))
            .values("bucket")
            .annotate(at=Min("first_at"), last_at=Max("last_at"), scans=Sum("scans"),
                      **{f"sum_{key}": Sum(f"{key}_sum") for key in HEADLINE_FIGURES},
                      **{f"n_{key}": Sum(f"{key}_n") for key in HEADLINE_FIGURES}))
    return list(rows)
