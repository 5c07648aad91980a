"""The API's JSON parser: refuses text no database column can store, and deep nesting.

JSON may carry U+0000 and lone surrogates (\\ud800), which PostgreSQL rejects (NUL in text and
jsonb) and UTF-8 cannot encode. Refusing them here, once for every API view, turns what would be
a database error (a 500, and for a host agent a retry loop) into a 400 that names the place.

Nesting is limited to MAX_JSON_DEPTH: a body nested 100,000 deep makes the JSON decoder raise
RecursionError, and one a few hundred deep would make every recursive reader after it (schema
validation, serialising, jsonb) do the same. No document the API takes comes near the limit."""

from __future__ import annotations

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

MAX_JSON_DEPTH = 64


class TooDeep(ValueError):
    pass


def unstorable_text(value, path: str = "", max_depth: int = MAX_JSON_DEPTH) -> str | None:
    """The path of the first string (key or value) holding NUL or a lone surrogate, or None.
    Raises TooDeep when arrays and objects nest deeper than `max_depth`."""
    stack = [(path, value, 0)]
    while stack:
        where, item, depth = stack.pop()
        if isinstance(item, dict | list) and depth >= max_depth:
            raise TooDeep(where or "(top)")
        if isinstance(item, str):
            if "\x00" in item or any("\ud800" <= ch <= "\udfff" for ch in item):
                return where or "(top)"
        elif isinstance(item, dict):
            for key, child in item.items():
                if unstorable_text(key) is not None:
                    return f"{where}/{key!r}"
                stack.append((f"{where}/{key}", child, depth + 1))
        elif isinstance(item, list):
            stack.extend((f"{where}/{i}", child, depth + 1) for i, child in enumerate(item))
    return None


class StrictJSONParser(JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        too_deep = ParseError(f"JSON nested deeper than {MAX_JSON_DEPTH} levels is not accepted")
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:  # the decoder gave up long before our limit would
            raise too_deep from None
        try:
            where = unstorable_text(data)
        except TooDeep:
            raise too_deep from None
        if where is not None:
            raise ParseError(f"JSON text at {where} contains NUL or an unpaired surrogate, "
                             "which cannot be stored")
        return data
