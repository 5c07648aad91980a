"""What every history series shares: the scans it reads, its time range, and downsampling in SQL.

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

import functools
import json
import math
from collections.abc import Iterable
from datetime import datetime, timedelta

from django.db.models import BigIntegerField, Func, Max, Min, Sum, TextField, Value
from django.db.models.functions import Cast
from django.utils import timezone

from scans.endpoints import profile as load_profile
from scans.history import rollups
from scans.models import Endpoint, Scan, ScanStatus

DEFAULT_MAX_POINTS = 200


class TimeBucket(Func):
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


def range_bounds(since: datetime | None, until: datetime | None, earliest) -> tuple[datetime, datetime]:
    until = until or timezone.now()
    if since is None:
        since = earliest() or until
    return since, until


def bucket_width_s(since: datetime, until: datetime, buckets: int) -> int:
    """Whole seconds per bucket, so that a row at exactly `until` still falls in the last one."""
    span = max(0.0, (until - since).total_seconds())
    return max(1, math.ceil((span + 1) / max(1, buckets)))


def series_count(rows, profile_names: Iterable[str] = ()) -> int:
    """How many series the range holds: scoring versions × loads (each is bucketed apart)."""
    return max(1, rows.values("scoring_version", *profile_names).distinct().count())


PROFILE_NAMES = [f"pf_{name}" for name in load_profile.PLAN_PATHS]


def profile_fields(row) -> dict:
    """The load's label and key for a row carrying the pf_* values."""
    # typed, so that 1, 1.0 and True (equal as keys) are not taken for one another
    values = tuple((type(v), v) for v in (row.get(name) for name in PROFILE_NAMES))
    try:
        label, key = _label_and_key(values)
    except TypeError:  # an unhashable value: worked out afresh
        label, key = _label_and_key.__wrapped__(values)
    return {"profile": label, "profile_key": key}


# A series repeats a handful of loads over hundreds of points (a dashboard: 30 grades of 50
# endpoints), and working a label out parses every pf_* value.
@functools.lru_cache(maxsize=512)
def _label_and_key(values: tuple) -> tuple[str, str]:
    row = {name: value for name, (_, value) in zip(PROFILE_NAMES, values, strict=True)}
    loaded = load_profile.profile_of_row(row)
    return loaded.label, loaded.key


def check_max_points(max_points: int) -> None:
    if max_points < 1:
        raise ValueError(f"max_points must be at least 1, got {max_points!r}")


def graded_scans(endpoint: Endpoint, location: str | None = None):
    # The caller holds an endpoint it was allowed to see; its rows are read through the scoped
    # manager, narrowed to that endpoint's team and then to the endpoint itself (and to one
    # scan location when asked: an endpoint scanned from two places has two histories).
    scans = Scan.objects.for_team(endpoint.team_id).filter(
        endpoint=endpoint, status=ScanStatus.SUCCEEDED)
    return scans.filter(location=location) if location else scans


def as_float(value, digits: int | None = None) -> float | None:
    if value is None:
        return None
    return round(float(value), digits) if digits is not None else float(value)


def default_since(days: int = 90, now: datetime | None = None) -> datetime:
    """The start of the default chart range: the last `days` days."""
    return (now or timezone.now()) - timedelta(days=days)


# --- rollups (scans/history/rollups.py): long ranges read hours and days, not scans ------------


def widened(rows, base, **lookups):
    """`base` narrowed by `lookups`, carrying the annotations `rows` carries (the same SQL):
    the raw rows of a range laid on whole hours, from the hour the rollups end."""
    return base.filter(**lookups).annotate(**dict(rows.query.annotations))


def series_count_with_rollups(rows, rolled, names: list[str]) -> int:
    """How many series (version × load × URL) the raw rows and the rollup rows hold together."""
    keys = {rollups.group_key(r, bucket=False)
            for r in rows.values("scoring_version", *names).distinct()}
    keys |= {rollups.group_key(_with_plan(r), bucket=False)
             for r in rolled.annotate(plan_text=_PLAN_TEXT)
             .values("scoring_version", "plan_text", "target_url").distinct()}
    return max(1, len(keys))


def rolled_buckets(rolled, since: datetime, width: int, **aggregates) -> list[dict]:
    rows = (rolled.annotate(bucket=TimeBucket("bucket_start", since.timestamp(), width),
                            plan_text=_PLAN_TEXT)
            .values("bucket", "scoring_version", "plan_text", "target_url")
            .annotate(at=Min("first_at"), last_at=Max("last_at"), scans=Sum("scans"),
                      **aggregates))
    return [_with_plan(r) for r in rows]


# Rollup rows are grouped by their load as text, not as jsonb: sorting a range's rows by a
# jsonb object compared every key of it (most of the query's time), while equal texts compare
# at once. The object holds only texts and nulls (rollups.py writes it with #>>), so two loads
# are the same object exactly when they are the same text.
_PLAN_TEXT = Cast("plan", TextField())


def _with_plan(row: dict) -> dict:
    """A rollup row read with its load as text (`plan_text`), with the load as an object
    again (`plan`) and spread into the pf_* names history's rows carry."""
    row = dict(row)
    text = row.pop("plan_text")
    row["plan"] = json.loads(text) if text is not None else None
    return {**row, **rollups.rolled_plan(row)}
