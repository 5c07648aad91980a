"""The headline figures over time (TTFT p50 and p95, tokens per second of the first level; the
shares of valid tool calls and JSON replies of the top level, for an agent-shaped load), as the
endpoint page draws them, downsampled as scans/history/downsampling.py says."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Count, Max, Min, Sum

from scans.history import rollups
from scans.history.downsampling import (
    DEFAULT_MAX_POINTS,
    TimeBucket,
    as_float,
    bucket_width_s,
    check_max_points,
    graded_scans,
)
from scans.models import Endpoint

__all__ = ["HEADLINE_FIGURES", "HeadlinePoint", "headline_history"]

# The headline figures the endpoint page draws over time: the Scan column each one is stored
# in (scans/running/worker.py, report_columns). The rollups keep a <key>_sum and <key>_n of each.
HEADLINE_FIGURES = {
    # of the first level (one request at a time)
    "ttft_p50": "ttft_p50_ms",
    "ttft_p95": "ttft_p95_ms",
    "tokens_per_s": "tokens_per_s",
    # of the top level, where the load sent tools or a schema (shares from 0 to 1)
    "tool_calls_valid": "tool_calls_valid_share",
    "json_valid": "json_valid_share",
}
# Shares keep four decimals (a hundredth of a percent); times and rates one.
_SHARES = ("tool_calls_valid", "json_valid")


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
    """The endpoint's headline figures between `since` and `until`, oldest first, from the
    scans' columns (no report is read)."""
    check_max_points(max_points)
    rows = graded_scans(endpoint, location).filter(queued_at__gte=since, queued_at__lte=until)
    figures = HEADLINE_FIGURES
    if rows.count() <= max_points:
        return [
            HeadlinePoint(at=r["queued_at"], last_at=r["queued_at"], scans=1,
                          figures={key: as_float(r[column]) for key, column in figures.items()},
                          scan_id=r["public_id"])
            for r in rows.order_by("queued_at").values("queued_at", "public_id",
                                                       *figures.values())
        ]
    width = bucket_width_s(since, until, max_points)
    span = rollups.long_range(since, until, width)
    rolled: list[dict] = []
    if span is not None:
        since, width = span.since, span.width(max_points)
        rows = graded_scans(endpoint, location).filter(
            queued_at__gte=max(since, span.rolled_until), queued_at__lte=until)
        rolled = _rolled_headlines(span.scan_rollups(endpoint, location), since, width)
    bucketed = (
        rows.annotate(bucket=TimeBucket("queued_at", since.timestamp(), width))
        .values("bucket")
        .annotate(at=Min("queued_at"), last_at=Max("queued_at"), scans=Count("pk"),
                  **{f"sum_{key}": Sum(column) for key, column in figures.items()},
                  **{f"n_{key}": Count(column) for key, column in figures.items()})
        .order_by("bucket")
    )
    sums = ["scans", *(f"{part}_{key}" for key in figures for part in ("sum", "n"))]
    merged = rollups.merge([*bucketed, *rolled], sums=sums, key=lambda r: r["bucket"])
    return [HeadlinePoint(at=r["at"], last_at=r["last_at"], scans=r["scans"],
                          figures={key: _rounded(key, r[f"sum_{key}"] / r[f"n_{key}"]
                                                 if r[f"n_{key}"] else None)
                                   for key in figures})
            for r in merged]


def _rounded(key: str, value: object) -> float | None:
    return as_float(value, 4 if key in _SHARES else 1)


def _rolled_headlines(rolled, since: datetime, width: int) -> list[dict]:
    rows = (rolled.annotate(bucket=TimeBucket("bucket_start", since.timestamp(), width))
            .values("bucket")
            .annotate(at=Min("first_at"), last_at=Max("last_at"), scans=Sum("scans"),
                      **{f"sum_{key}": Sum(f"{key}_sum") for key in HEADLINE_FIGURES},
                      **{f"n_{key}": Sum(f"{key}_n") for key in HEADLINE_FIGURES}))
    return list(rows)
