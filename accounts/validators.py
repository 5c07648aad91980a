"""Names people type are one line of text.

A name ends up in email subjects (where a line break is a header injection, and Django raises
BadHeaderError), log lines, CSV exports and page titles. Control characters (C0, C1, DEL) and
the Unicode line and paragraph separators are refused with a clear per-field error wherever a
name is entered: the endpoint form and API, team creation, token labels and host names.
"""

from __future__ import annotations

import unicodedata

from django.core.exceptions import ValidationError

_LINE_BREAKING = {"Cc", "Zl", "Zp"}


def _first_control(value: str) -> tuple[int, str] | None:
    for position, char in enumerate(value):
        if unicodedata.category(char) in _LINE_BREAKING:
            return position, char
    return None


def validate_one_line(value: str) -> None:
    found = _first_control(value or "")
    if found is not None:
        position, char = found
        raise ValidationError(
            f"Use one line of text: control characters are not allowed (found "
            f"U+{ord(char):04X} at position {position + 1}).", code="control_character")


def one_line(value: str) -> str:
    """`value` with every control character made a space (for names stored before the rule)."""
    return "".join(" " if unicodedata.category(c) in _LINE_BREAKING else c for c in value)
