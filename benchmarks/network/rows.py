"""Model instances from plain SQL, for the host calls' hottest statements.

A host's completion, lease and authentication run a handful of one-row statements each, many
times a second. Through the ORM, building those queries (and Django's RawQuerySet, reading
them back) cost more CPU than PostgreSQL's work on them, so the statements that run on every
host call are written in SQL here and read back as the ORM would: every concrete column in
the model's field order, each value through the field's own converters (a JSON column's
`from_db_value`), then `Model.from_db`, so the instances are the ORM's own (saving them,
refreshing them and reading their fields all work as usual).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cache
from typing import Any, TypeVar

from django.db import connection
from django.db.models import Model

M = TypeVar("M", bound=Model)


@cache
def columns(model: type[Model], alias: str) -> str:
    """`alias.column, …` for every concrete field, in the order `fetch` reads them back."""
    return ", ".join(f"{alias}.{field.column}" for field in model._meta.concrete_fields)


@cache
def _reading(model: type[Model]) -> tuple[list[str], list[tuple[int, list[Callable]]]]:
    """The model's attribute names in field order, and each column's converters, as the ORM's
    compiler finds them (the backend's, then the field's own)."""
    names, converters = [], []
    for index, field in enumerate(model._meta.concrete_fields):
        names.append(field.attname)
        column = field.get_col(model._meta.db_table)
        found = connection.ops.get_db_converters(column) + column.get_db_converters(connection)
        if found:
            converters.append((index, [(lambda value, f=f, c=column: f(value, c, connection))
                                       for f in found]))
    return names, converters


def fetch(model: type[M], sql: str, params: Sequence[Any]) -> list[M]:
    """Run `sql` (which selects `columns(model, …)`, or RETURNING them) and return its rows as
    instances of `model`."""
    names, converters = _reading(model)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    found = []
    for row in rows:
        values = list(row)
        for index, functions in converters:
            for convert in functions:
                values[index] = convert(values[index])
        found.append(model.from_db(connection.alias, names, values))
    return found
