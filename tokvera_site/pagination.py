"""Cursor pagination that refuses what it cannot use (issue 19).

DRF's CursorPagination silently ignores a `page_size` that is not a positive whole number
(`abc`, `0`, `-3`) and quietly cuts one above the maximum, answers a malformed cursor with
404 ("Invalid cursor"), and passes a forged cursor's position straight into the query (a
database error, 500). Here each of those is a 400 that names the parameter, and the schema
states the limits (minimum 1, maximum `max_page_size`).
"""

from __future__ import annotations

from django.core.exceptions import FieldDoesNotExist
from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework import exceptions
from rest_framework.pagination import CursorPagination


class StrictCursorPagination(CursorPagination):
    page_size_query_param = "page_size"
    page_size = 100
    max_page_size = 500

    def get_page_size(self, request):
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

    def paginate_queryset(self, queryset, request, view=None):
        self._model = queryset.model  # decode_cursor checks a cursor's position against it
        return super().paginate_queryset(queryset, request, view)

    def decode_cursor(self, request):
        refused = exceptions.ValidationError(
            {self.cursor_query_param: ["not a cursor this API gave out (use the next or "
                                       "previous link of a page)"]})
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

    def get_schema_operation_parameters(self, view):
        return [
            {
                "name": self.cursor_query_param,
                "required": False,
                "in": "query",
                "description": "The cursor of a page: copy it from the `next` or `previous` link. "
                               "Anything else is refused with 400.",
                "schema": {"type": "string"},
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
