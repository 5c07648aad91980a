"""How the Django admin's lists show times and figures: one time format everywhere
("2026-12-02 06:08 UTC", in the viewer's active zone, named), and numbers rounded with their
unit ("321 ms", "45.5 tokens/s"), instead of Django's "Dec. 2, 2026, 6:08 a.m." beside a
strftime of our own and raw floats. No import of scans or benchmarks: accounts uses it too."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

from django.contrib import admin
from django.utils import dateformat, timezone

MISSING = "—"
TIME_FORMAT = "Y-m-d H:i T"


def when(value: datetime.datetime | None) -> str:
    """A time as the admin shows it, in the active zone; "—" for none."""
    if value is None:
        return MISSING
    return dateformat.format(timezone.localtime(value), TIME_FORMAT)


def time_column(field: str, description: str | None = None) -> Callable:
    """A column showing `field` with when(), sortable by the field: an item of list_display,
    or a ModelAdmin attribute (then named in readonly_fields and fieldsets)."""

    @admin.display(description=description or field.replace("_", " "), ordering=field)
    def column(*args: Any) -> str:  # (obj), or (modeladmin, obj) as a ModelAdmin's method
        return when(getattr(args[-1], field))

    column.__name__ = f"{field}_shown"
    return column


def figure(value: float | None, unit: str, digits: int = 0) -> str:
    """A number rounded to `digits` with its unit: figure(321.04, "ms") -> "321 ms"."""
    if value is None:
        return MISSING
    return f"{value:,.{digits}f} {unit}"
