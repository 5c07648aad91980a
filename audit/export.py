"""An audit entry as the page, the JSON API and the exports (JSON lines, CSV) all say it."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Iterator
from typing import Any

from audit.models import AuditEntry

COLUMNS = ("id", "at", "team", "actor_kind", "actor", "address", "action", "object_type",
           "object_id", "object_name", "changes")


def entry_dict(entry: AuditEntry, team_slug: str) -> dict[str, Any]:
    return {"id": str(entry.public_id), "at": entry.at.isoformat(), "team": team_slug,
            "actor_kind": entry.actor_kind, "actor": entry.actor, "address": entry.address,
            "action": entry.action, "object_type": entry.object_type,
            "object_id": entry.object_id, "object_name": entry.object_name,
            "changes": entry.changes}


def json_lines(rows: Iterable[dict[str, Any]]) -> Iterator[str]:
    for row in rows:
        yield json.dumps(row, ensure_ascii=False) + "\n"


def csv_lines(rows: Iterable[dict[str, Any]]) -> Iterator[str]:
    """One header, then one line per row; `changes` as its JSON text."""
    yield csv_line(COLUMNS)
    for row in rows:
        yield csv_line([json.dumps(row[name], ensure_ascii=False) if name == "changes"
                         else ("" if row[name] is None else row[name]) for name in COLUMNS])


def csv_line(values: Iterable[Any]) -> str:
    out = io.StringIO()
    csv.writer(out).writerow(values)
    return out.getvalue()
