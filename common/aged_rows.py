"""Deleting rows past their retention a batch at a time: each batch its own transaction (row
locks only, so writers go on beside it), until none is left or the pass's time is spent."""

from __future__ import annotations

import time
from datetime import datetime

from django.db import connection, transaction

__all__ = ["delete_older_than"]


def delete_older_than(table: str, column: str, before: datetime, *, batch: int,
                      budget_s: float) -> int:
    """Delete the rows of `table` whose `column` is before `before`, `batch` per transaction,
    across every team (by age alone: nothing of the rows leaves the database); returns how
    many were deleted. `table` and `column` are the caller's constants, never input."""
    sql = (f"DELETE FROM {table} WHERE id IN "  # noqa: S608 - constant identifiers only
           f"(SELECT id FROM {table} WHERE {column} < %s LIMIT %s)")
    deleted, started = 0, time.monotonic()
    while time.monotonic() - started < budget_s:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(sql, [before, batch])
            count = cursor.rowcount
        deleted += count
        if count < batch:
            break
    return deleted
