"""An endpoint's grades over time (the grade line, its sparklines and the grade history API),
downsampled as scans/history/downsampling.py says; each point carries its scoring version.

Only succeeded scans have grades; a down scan has no letter and no points (a gap on the line).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from datetime import datetime

from django.db.models import (
    Case,
    Count,
    IntegerField,
    Max,
    Min,
    OuterRef,
    Q,
    Sum,
    Value,
    When,
)
from django.db.models.functions import Cast

from accounts.tenancy import scoped_to_teams
from scans.endpoints import profile as load_profile
from scans.grader import GRADES
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
    widened,
)
from scans.models import Endpoint, Scan, ScanStatus

__all__ = ["GradePoint", "grade_history", "latest_grades"]

LETTERS = GRADES
_GRADE_SUMS = ("scans", "psum", "pn", "capped", "no_letter", "down")


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
    #: The load the scan ran (report.plan, scans/endpoints/profile.py): grades of different loads are
    #: not comparable either, so charts break where `profile_key` changes.
    profile: str = ""
    profile_key: str = ""
    down: int = 0
    #: The URL the scan reached (report.target.base_url): a change is another server, so
    #: charts break there too and mark it "new URL".
    url: str = ""
    #: What the server said of itself (Scan.server_label; "" when it said nothing, and for a
    #: bucket of scans): a change of engine, version or hardware breaks the line too.
    server: str = ""

    @property
    def has_letter(self) -> bool:
        return self.grade in LETTERS

    def as_dict(self) -> dict:
        return asdict(self)


def grade_history(endpoint: Endpoint, since: datetime | None = None, until: datetime | None = None,
                  max_points: int = DEFAULT_MAX_POINTS,
                  location: str | None = None) -> list[GradePoint]:
    """The endpoint's grades between `since` and `until` (inclusive), oldest first.

    `endpoint` must be one the caller was allowed to see (fetched through the scoping layer).
    At most `max_points` points: one per scan when they fit, else time buckets computed in SQL
    (scans/history/downsampling.py). `since` None means from the first scan; `until` None, now.
    """
    check_max_points(max_points)
    scans = graded_scans(endpoint, location)
    since, until = range_bounds(since, until, lambda: scans.aggregate(t=Min("queued_at"))["t"])
    # The load and URL from their columns (never the reports: a list of them would read each).
    rows = scans.filter(queued_at__gte=since, queued_at__lte=until).annotate(
        **load_profile.plan_columns())
    if rows.count() <= max_points:
        return [
            GradePoint(
                at=r["queued_at"], last_at=r["queued_at"], scans=1,
                points=as_float(r["points"]), points_min=as_float(r["points"]),
                points_max=as_float(r["points"]), grade=r["grade"],
                uncapped_grade=r["uncapped_grade"],
                capped=int(_is_capped(r["grade"], r["uncapped_grade"])),
                caps=tuple(r["caps_applied"] or ()),
                no_letter=int(r["grade"] not in LETTERS),
                scoring_version=r["scoring_version"], provisional=r["provisional"],
                scan_id=r["public_id"], down=int(r["down"]), url=r["target_url"] or "",
                server=r["server_label"], **profile_fields(r),
            )
            for r in rows.order_by("queued_at").values(
                "queued_at", "points", "grade", "uncapped_grade", "scoring_version",
                "provisional", "public_id", "down", "target_url", "caps_applied",
                "server_label", *PROFILE_NAMES)
        ]
    names = [*PROFILE_NAMES, "target_url"]  # a bucket never mixes versions, loads or URLs
    # An hour or wider: whole hours (days), read from the rollups as far as they are complete.
    span = rollups.long_range(since, until, bucket_width_s(since, until, max_points))
    rolled: list[dict] = []
    if span is None:
        width = bucket_width_s(since, until, max_points // series_count(rows, names))
    else:
        since = span.since
        rows = widened(rows, scans, queued_at__gte=max(since, span.rolled_until),
                        queued_at__lte=until)
        rolled_rows = span.scan_rollups(endpoint, location)
        width = span.width(max_points // series_count_with_rollups(rows, rolled_rows, names))
        rolled = _rolled_grades(rolled_rows, since, width)
    bucketed = (
        rows.annotate(bucket=TimeBucket("queued_at", since.timestamp(), width))
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
            points=as_float(r["psum"] / r["pn"] if r["pn"] else None, 1),
            points_min=as_float(r["low"]), points_max=as_float(r["high"]), grade=r["worst"],
            uncapped_grade="", capped=r["capped"] or 0, caps=(), no_letter=r["no_letter"] or 0,
            scoring_version=r["scoring_version"], provisional=bool(r["provisional_any"]),
            down=r["down"] or 0, url=r["target_url"] or "", **profile_fields(r),
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


_LATEST_FIELDS = ("endpoint_id", "queued_at", "points", "grade", "uncapped_grade",
                  "scoring_version", "provisional", "public_id", "down", "target_url",
                  "server_label")


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
        points = as_float(r["points"])
        result[r["endpoint_id"]].append(GradePoint(
            at=r["queued_at"], last_at=r["queued_at"], scans=1, points=points,
            points_min=points, points_max=points, grade=r["grade"],
            uncapped_grade=r["uncapped_grade"],
            capped=int(_is_capped(r["grade"], r["uncapped_grade"])), caps=(),
            no_letter=int(r["grade"] not in LETTERS), scoring_version=r["scoring_version"],
            provisional=r["provisional"], scan_id=r["public_id"], down=int(r["down"]),
            url=r.get("target_url") or "", server=r.get("server_label") or "",
            **profile_fields(r),
        ))
    for series in result.values():
        series.sort(key=lambda p: p.at)
    return result


def _rolled_grades(rolled, since: datetime, width: int) -> list[dict]:
    return rolled_buckets(
        rolled, since, width, psum=Sum("points_sum"), pn=Sum("points_n"),
        low=Min("points_min"), high=Max("points_max"), worst=Max("worst_grade"),
        capped=Sum("capped"), no_letter=Sum("no_letter"),
        provisional_any=Max("provisional"), down=Sum("down"))
