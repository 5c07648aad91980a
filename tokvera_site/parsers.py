"""The API's JSON parser: refuses text no database column can store.

JSON may carry U+0000 and lone surrogates (\\ud800), which PostgreSQL rejects (NUL in text and
jsonb) and UTF-8 cannot encode. Refusing them here, once for every API view, turns what would be
a database error (a 500, and for a host agent a retry loop) into a 400 that names the place."""

from __future__ import annotations

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser


def unstorable_text(value, path: str = "") -> str | None:
    """The path of the first string (key or value) holding NUL or a lone surrogate, or None."""
    stack = [(path, value)]
    while stack:
        where, item = stack.pop()
        if isinstance(item, str):
            if "\x00" in item or any("\ud800" <= ch <= "\udfff" for ch in item):
                return where or "(top)"
        elif isinstance(item, dict):
            for key, child in item.items():
                if unstorable_text(key) is not None:
                    return f"{where}/{key!r}"
                stack.append((f"{where}/{key}", child))
        elif isinstance(item, list):
            stack.extend((f"{where}/{i}", child) for i, child in enumerate(item))
    return None


class StrictJSONParser(JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        data = super().parse(stream, media_type, parser_context)
        where = unstorable_text(data)
        if where is not None:
            raise ParseError(f"JSON text at {where} contains NUL or an unpaired surrogate, "
                             "which cannot be stored")
        return data
