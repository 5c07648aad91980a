"""Secrets never stored from a response.

An upstream may echo what it was sent (its error body quoting the `Authorization` header, say),
and the site keeps error text in report.json (failure examples, request timelines) and on Scan
rows, where every viewer of the team can read it. Everything stored from a scan goes through
`redact_report` / `redact_text` first: the endpoint's own secrets are cut out wherever they
appear, and the credential patterns below (Authorization values, bearer credentials, tokens)
are masked; the site's log filter (common.logging) masks the same patterns.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

MASK = "[redacted]"
# API tokens (tkv_…), host tokens (tkh_…), Authorization values (any scheme), bare bearer
# credentials, password fields and invitation links (whose path is the invitation's secret).
SECRET_PATTERNS = [
    re.compile(r"\btk[vh]_[A-Za-z0-9_\-]{8,}"),
    re.compile(r"(?i)(authorization['\"]?\s*[:=]\s*['\"]?(?:[a-z]+\s+)?)[^\s'\",}\]]+"),
    re.compile(r"(?i)(\bbearer\s+)[A-Za-z0-9._~+/=\-]{6,}"),
    re.compile(r"(?i)(password['\"]?\s*[:=]\s*['\"]?)[^\s'\",&]+"),
    re.compile(r"(?i)((?:/|%2F)invites(?:/|%2F))[A-Za-z0-9_\-]{16,}"),
]
# Every match of SECRET_PATTERNS holds one of these words (in any case) or token prefixes (as
# written): text without them is left as it is, unread by the patterns. Keep them in step.
PATTERN_WORDS = ("authorization", "bearer", "password", "invites")
TOKEN_PREFIXES = ("tkv_", "tkh_")
# The only characters outside ASCII that a case-insensitive pattern takes for an ASCII letter
# (Python's re): İ and ı for i, ſ for s, the Kelvin sign for k.
FOLDED_INTO_ASCII = ("\u0130", "\u0131", "\u017f", "\u212a")
# A secret cut short where an error body was truncated still leaks this much at most.
MIN_TAIL_PREFIX = 6


def _may_match(text: str) -> bool:
    """False when no SECRET_PATTERNS can match `text`: the test costs a few substring
    searches, where the patterns cost a regular expression each."""
    if any(prefix in text for prefix in TOKEN_PREFIXES):
        return True
    if not text.isascii() and any(char in text for char in FOLDED_INTO_ASCII):
        return True
    lowered = text.lower()
    return any(word in lowered for word in PATTERN_WORDS)


def redact_patterns(text: str) -> str:
    """`text` with every credential that matches SECRET_PATTERNS masked."""
    if not _may_match(text):
        return text
    for pattern in SECRET_PATTERNS:
        if pattern.groups:
            text = pattern.sub(lambda m: m.group(1) + MASK, text)
        else:
            text = pattern.sub(MASK, text)
    return text


def redact_text(text: str, secrets: Iterable[str] = ()) -> str:
    for secret in secrets:
        if not secret:
            continue
        text = text.replace(secret, MASK)
        if secret[:MIN_TAIL_PREFIX] not in text:
            continue
        # An echoed key at the very end of a truncated body: mask its visible prefix too.
        for length in range(len(secret) - 1, MIN_TAIL_PREFIX - 1, -1):
            if text.endswith(secret[:length]):
                text = text[: -length] + MASK
                break
    return redact_patterns(text)


def redact_report(value, secrets: Iterable[str] = ()):
    """A JSON value (a report) with every string redacted, keys included: a copy when a string
    may change, else `value` itself. Whether one may is read off all its strings joined, in one
    pass (a report holds thousands, most of them keys and labels, beside thousands of numbers):
    no pattern's word and no secret's first characters there, none in any of them."""
    secrets = [s for s in secrets if s]
    joined = "\n".join(_strings(value, []))
    if not _may_match(joined) and not any(s[:MIN_TAIL_PREFIX] in joined for s in secrets):
        return value
    return _walk(value, secrets)


_SCALARS = (int, float, bool, type(None))


def _strings(value, found: list[str]) -> list[str]:
    """Every string in `value` (keys included) that _walk would redact, and perhaps more."""
    if isinstance(value, str):
        found.append(value)
    elif isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str):
                found.append(key)
            if type(item) not in _SCALARS:  # most of a report: no call for each number
                _strings(item, found)
    elif isinstance(value, list | tuple):
        for item in value:
            if type(item) not in _SCALARS:
                _strings(item, found)
    return found


def _walk(value, secrets: list[str]):
    if isinstance(value, str):
        return redact_text(value, secrets)
    if isinstance(value, dict):
        return {_walk(k, secrets): _walk(v, secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [_walk(item, secrets) for item in value]
    return value
