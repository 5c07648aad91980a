"""Audit entries are kept AUDIT_RETENTION_DAYS, then deleted by the hourly retention pass
(scans.tasks.prune_reports), in batches of short transactions."""

from __future__ import annotations

import time
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone


def prune(*, batch: int = 10_000, budget_s: float = 60.0, now: datetime | None = None) -> int:
    """Delete entries older than AUDIT_RETENTION_DAYS; how many were deleted."""
    before = (now or timezone.now()) - timedelta(days=settings.AUDIT_RETENTION_DAYS)
    deleted, started = 0, time.monotonic()
    # Every team's, by age alone (nothing of the rows leaves the database).
    sql = """DELETE FROM audit_auditentry WHERE id IN (
                 SELECT id FROM audit_auditentry WHERE at < %s LIMIT %s)"""
    while time.monotonic() - started < budget_s:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(sql, [before, batch])
            count = cursor.rowcount
        deleted += count
        if count < batch:
            break
    return deleted
