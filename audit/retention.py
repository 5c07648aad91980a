"""Audit entries are kept AUDIT_RETENTION_DAYS, then deleted by the hourly retention pass
(scans.tasks.prune_reports), in batches of short transactions."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from common import aged_rows


def prune(*, batch: int = 10_000, budget_s: float = 60.0, now: datetime | None = None) -> int:
    """Delete entries older than AUDIT_RETENTION_DAYS; how many were deleted."""
    before = (now or timezone.now()) - timedelta(days=settings.AUDIT_RETENTION_DAYS)
    return aged_rows.delete_older_than("audit_auditentry", "at", before, batch=batch,
                                       budget_s=budget_s)
