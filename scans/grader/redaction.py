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
# A secret cut short where an error body was truncated still leaks this much at most.
MIN_TAIL_PREFIX = 6


def redact_patterns(text: str) -> str:
    """`text` with every credential that matches SECRET_PATTERNS masked."""
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
    """A copy of a JSON value (a report) with every string redacted, keys included."""
    return _walk(value, [s for s in secrets if s])


def _walk(value, secrets: list[str]):
    if isinstance(value, str):
        return redact_text(value, secrets)
    if isinstance(value, dict):
        return {_walk(k, secrets): _walk(v, secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [_walk(item, secrets) for item in value]
    return value
