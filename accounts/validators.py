"""Names people type are one line of text that reads as it is written.

A name ends up in email subjects (where a line break is a header injection, and Django raises
BadHeaderError), log lines, CSV exports, Prometheus labels and page titles. Refused with a clear
per-field error wherever a name is entered (the endpoint form and API, team creation, token
labels and host names):
- control characters (C0, C1, DEL) and the Unicode line and paragraph separators;
- the bidirectional controls (Unicode's Bidi_Control property: the marks, embeddings,
  overrides and isolates), which make a name display reversed or reordered ("Trojan Source").
  Other format characters (the zero-width joiner of emoji sequences, soft hyphens) change no
  direction and stay allowed.
"""

from __future__ import annotations

import unicodedata

from django.core.exceptions import ValidationError

_LINE_BREAKING = {"Cc", "Zl", "Zp"}
# Unicode's Bidi_Control property (PropList.txt): ALM, LRM, RLM, LRE, RLE, PDF, LRO, RLO, and
# the isolates LRI, RLI, FSI, PDI.
BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e"
                          "\u2066\u2067\u2068\u2069")


def _refused(char: str) -> str | None:
    """Why `char` has no place in a name, or None."""
    if unicodedata.category(char) in _LINE_BREAKING:
        return "control"
    if char in BIDI_CONTROLS:
        return "bidi"
    return None


def validate_one_line(value: str) -> None:
    for position, char in enumerate(value or ""):
        kind = _refused(char)
        if kind is None:
            continue
        where = f"U+{ord(char):04X} at position {position + 1}"
        if kind == "control":
            raise ValidationError(f"Use one line of text: control characters are not allowed "
                                  f"(found {where}).", code="control_character")
        raise ValidationError(f"Use plain text: characters that change the display direction "
                              f"are not allowed (found {where}).", code="bidi_control")


def one_line(value: str) -> str:
    """`value` as one line that reads as written, for names stored before the rules: every
    control character made a space, every bidirectional control dropped."""
    return "".join(" " if _refused(c) == "control" else c for c in value
                   if c not in BIDI_CONTROLS)
