"""How a `RequestRecord` travels in report.json: one timeline per request, times in ms from the
scan's origin. The grader writes timelines (report.py); the site reads them back to recompute
a pushed report from its own samples (proof.py). The mapping is read off the dataclass, so a new
measured field travels without an edit here."""

from __future__ import annotations

import functools
import typing
from array import array
from dataclasses import fields
from typing import Any

from scans.grader.measurement import RequestRecord

__all__ = ["is_time", "is_time_array", "key", "record_fields", "sample_times_ms"]


def is_time(name: str) -> bool:
    return name.endswith("_at")


def is_time_array(name: str, hint: Any) -> bool:
    return hint is array


def key(name: str, hint: Any) -> str:
    """The timeline key of a RequestRecord field."""
    if name == "failure":
        return "outcome"
    if is_time(name) or is_time_array(name, hint):
        return f"{name}_ms"
    return name


@functools.cache
def record_fields() -> tuple[tuple[str, Any], ...]:
    hints = typing.get_type_hints(RequestRecord)
    return tuple((f.name, hints[f.name]) for f in fields(RequestRecord) if f.name != "level")


def sample_times_ms(record: RequestRecord, origin: float) -> dict[str, list[float]]:
    """Every per-chunk time array of `record` as ms from `origin` (1 µs), for its timeline:
    what the site needs to recompute chunk gaps and chunk rates."""
    return {f"{name}_ms": [round((t - origin) * 1000.0, 3) for t in getattr(record, name)]
            for name, hint in record_fields() if is_time_array(name, hint)}
