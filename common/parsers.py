"""The API's JSON parser: refuses text no database column can store, and deep nesting.

JSON may carry U+0000 and lone surrogates (\\ud800), which PostgreSQL rejects (NUL in text and
jsonb) and UTF-8 cannot encode. Refusing them here, once for every API view, turns what would be
a database error (a 500, and for a host agent a retry loop) into a 400 that names the place.

Nesting is limited to MAX_JSON_DEPTH: a body nested 100,000 deep makes the JSON decoder raise
RecursionError, and one a few hundred deep would make every recursive reader after it (schema
validation, serialising, jsonb) do the same. No document the API takes comes near the limit.

`loads` is the same rule for a body a view reads itself (pushed reports, scans/running/pushes.py)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import IO, Any, NoReturn

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

MAX_JSON_DEPTH = 64
TOO_DEEP = f"the JSON is nested too deeply: at most {MAX_JSON_DEPTH} levels are accepted"


class TooDeep(ValueError):
    pass


class UnacceptableJSON(ValueError):
    """Not JSON, or JSON this site does not take; the message says which and where."""


def _refuse_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not JSON")


def loads(body: bytes | str) -> Any:
    """Parse a JSON body under the API parser's rules: no NaN or Infinity, at most
    MAX_JSON_DEPTH levels, no text the database cannot store. Raises UnacceptableJSON."""
    try:
        data = json.loads(body, parse_constant=_refuse_constant)
    except RecursionError:
        raise UnacceptableJSON(TOO_DEEP) from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise UnacceptableJSON(f"not JSON: {exc}") from None
    try:
        where = unstorable_text(data)
    except TooDeep:
        raise UnacceptableJSON(TOO_DEEP) from None
    if where is not None:
        raise UnacceptableJSON(f"JSON text at {where} contains NUL or an unpaired surrogate, "
                               "which cannot be stored")
    return data


def unstorable_text(value: Any, path: str = "", max_depth: int = MAX_JSON_DEPTH) -> str | None:
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
    def parse(self, stream: IO[Any], media_type: str | None = None,
              parser_context: Mapping[str, Any] | None = None) -> dict[str, Any]:
        too_deep = ParseError(TOO_DEEP)
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
