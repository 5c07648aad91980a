"""Capacity within the SLO over time: what each scan's capacity search found (the endpoint
page's trend, `GET /api/v1/endpoints/{id}/capacity`, the dashboard), downsampled as
scans/history/downsampling.py says, one series per SLO objective."""

from __future__ import annotations

import uuid
from dataclasses import asdict, dataclass
from datetime import datetime

from django.db.models import (
    Avg,
    Case,
    Count,
    FloatField,
    IntegerField,
    Max,
    Min,
    Sum,
    Value,
    When,
)
from django.db.models.fields.json import KeyTransform
from django.db.models.functions import Cast, Coalesce

from scans.history.downsampling import (
    DEFAULT_MAX_POINTS,
    TimeBucket,
    as_float,
    bucket_width_s,
    check_max_points,
    graded_scans,
    range_bounds,
)
from scans.models import Endpoint, Scan

__all__ = ["CapacityPoint", "capacity_history", "latest_capacity"]


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
    # Read through the endpoint's team like graded_scans; the partial index
    # scan_capacity_history holds exactly these rows.
    return graded_scans(endpoint, location).exclude(capacity_outcome="")


def latest_capacity(endpoint: Endpoint) -> Scan | None:
    """The endpoint's latest scan that searched for its capacity (the page's "serves up to N
    concurrent streams"), or None. Its report is not loaded: `capacity_found` holds the
    report's capacity section (reason, levels tried, SLO)."""
    return _searched_scans(endpoint).order_by("-queued_at", "-pk").defer("report").first()


def capacity_history(endpoint: Endpoint, since: datetime | None = None,
                     until: datetime | None = None, max_points: int = DEFAULT_MAX_POINTS,
                     location: str | None = None) -> list[CapacityPoint]:
    """The capacity found by each scan that searched, between `since` and `until`, oldest
    first; at most `max_points` (time buckets computed in SQL beyond that, one series per SLO
    objective)."""
    check_max_points(max_points)
    scans = _searched_scans(endpoint, location)
    since, until = range_bounds(since, until, lambda: scans.aggregate(t=Min("queued_at"))["t"])
    streams = Coalesce("capacity_concurrency", Value(0))
    rows = scans.filter(queued_at__gte=since, queued_at__lte=until).annotate(
        slo=KeyTransform("slo", "capacity_found"))
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
    width = bucket_width_s(since, until, max_points // series)

    def count(outcome: str):
        return Sum(Case(When(capacity_outcome=outcome, then=Value(1)), default=Value(0),
                        output_field=IntegerField()))

    bucketed = (
        rows.annotate(bucket=TimeBucket("queued_at", since.timestamp(), width),
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
            requests_per_s=as_float(r["rps"], 3), output_tokens_per_s=as_float(r["out"], 3),
            output_unit=r["unit"] or "", slo=r["slo"] if isinstance(r["slo"], dict) else None,
            pushed=r["pushed_count"] or 0,
        )
        for r in bucketed
    ]
