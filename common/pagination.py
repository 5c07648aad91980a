"""Cursor pagination that refuses what it cannot use.

DRF's CursorPagination silently ignores a `page_size` that is not a positive whole number
(`abc`, `0`, `-3`) and quietly cuts one above the maximum, answers a malformed cursor with
404 ("Invalid cursor"), and passes a forged cursor's position straight into the query (a
database error, 500). Here each of those is a 400 that names the parameter, and the schema
states the limits (minimum 1, maximum `max_page_size`).

A cursor is `offset.reverse.position` in plain digits (the position is the ordering time in
microseconds since 1970, UTC), so the schema's pattern says exactly which cursors are
accepted: any that matches is a place in the list, whoever wrote it. DRF's own base64 cursors,
given out before, are still read (and checked) so that a paging loop survives an upgrade.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from django.core.exceptions import FieldDoesNotExist, ImproperlyConfigured
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import models
from django.db.models import QuerySet
from django.utils.dateparse import parse_datetime
from rest_framework import exceptions
from rest_framework.pagination import Cursor, CursorPagination
from rest_framework.request import Request
from rest_framework.utils.urls import replace_query_param
from rest_framework.views import APIView

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MICROSECOND = timedelta(microseconds=1)
# offset.reverse.position: every string this matches is a cursor the API can use (a position
# from 1654 to 5138, an offset that DRF caps at offset_cutoff); an empty position is none.
CURSOR_PATTERN = r"^[0-9]{1,9}\.[01]\.(-?[0-9]{1,16}|[0-9]{17})?$"


class StrictCursorPagination(CursorPagination):
    page_size_query_param = "page_size"
    page_size = 100
    max_page_size = 500

    def get_page_size(self, request: Request) -> int | None:
        raw = request.query_params.get(self.page_size_query_param)
        if raw is None:
            return self.page_size
        message = f"expected a whole number from 1 to {self.max_page_size}"
        if not raw.isascii() or not raw.isdigit():
            raise exceptions.ValidationError({self.page_size_query_param: [message]})
        value = int(raw)
        if not 1 <= value <= self.max_page_size:
            raise exceptions.ValidationError({self.page_size_query_param: [message]})
        return value

    # Narrower than DRF's (a queryset or a list): a cursor page reads its rows' model.
    def paginate_queryset(self, queryset: QuerySet[Any, Any], request: Request,  # type: ignore[override]
                          view: APIView | None = None) -> list[Any] | None:
        self._model = queryset.model  # decode_cursor checks a cursor's position against it
        _ordering_time_field(queryset.model, self.ordering)
        return super().paginate_queryset(queryset, request, view)

    def encode_cursor(self, cursor: Cursor) -> str:
        position = ""
        if cursor.position is not None:  # str() of the ordering time (DRF's position)
            moment = parse_datetime(str(cursor.position))
            if moment is None:  # not a time: DRF's own form, which decode_cursor still reads
                return super().encode_cursor(cursor)
            position = str((moment - EPOCH) // MICROSECOND)
        encoded = f"{cursor.offset}.{int(cursor.reverse)}.{position}"
        return replace_query_param(self.base_url or "", self.cursor_query_param, encoded)

    def decode_cursor(self, request: Request) -> Cursor | None:
        refused = exceptions.ValidationError(
            {self.cursor_query_param: ["not a cursor this API gave out (use the next or "
                                       "previous link of a page)"]})
        encoded = request.query_params.get(self.cursor_query_param)
        if encoded is not None and re.fullmatch(CURSOR_PATTERN, encoded):
            offset, reverse, micros = encoded.split(".")
            # The pattern bounds the position to years 1654 to 5138: always a time.
            position = str(EPOCH + int(micros) * MICROSECOND) if micros else None
            # DRF's positions are text (str() of the row's value); its stubs say int.
            return Cursor(offset=min(int(offset), self.offset_cutoff), reverse=reverse == "1",
                          position=position)  # type: ignore[arg-type]
        try:
            cursor = super().decode_cursor(request)
        except exceptions.NotFound:
            raise refused from None
        if cursor is None or cursor.position is None:
            return cursor
        model = getattr(self, "_model", None)
        if model is not None:
            name = self.ordering[0].lstrip("-") if isinstance(self.ordering, list | tuple) \
                else str(self.ordering).lstrip("-")
            try:
                model._meta.get_field(name).to_python(cursor.position)
            except (DjangoValidationError, FieldDoesNotExist, ValueError, TypeError):
                raise refused from None
            if "\x00" in str(cursor.position):
                raise refused
        return cursor

    def get_schema_operation_parameters(self, view: APIView) -> list[Any]:
        return [
            {
                "name": self.cursor_query_param,
                "required": False,
                "in": "query",
                "description": "The cursor of a page: copy it from the `next` or `previous` link. "
                               "Anything else is refused with 400.",
                "schema": {"type": "string", "pattern": CURSOR_PATTERN},
            },
            {
                "name": self.page_size_query_param,
                "required": False,
                "in": "query",
                "description": f"Results per page (default {self.page_size}, at most "
                               f"{self.max_page_size}); anything else is refused with 400.",
                "schema": {"type": "integer", "minimum": 1, "maximum": self.max_page_size},
            },
        ]


def _ordering_time_field(model: type[models.Model], ordering: str | Sequence[str]) -> None:
    """Cursors carry the ordering column as a time: the first ordering field must be one."""
    name = (ordering[0] if isinstance(ordering, list | tuple) else str(ordering)).lstrip("-")
    if not isinstance(model._meta.get_field(name), models.DateTimeField):
        raise ImproperlyConfigured(f"{model.__name__}: a cursor page is ordered by a time, "
                                   f"not by {name!r}")
