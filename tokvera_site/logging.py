"""A logging filter that masks secrets before any handler sees them."""

from __future__ import annotations

import logging
import re

# API tokens (tkv_…), host tokens (tkh_…), bearer headers and password fields.
_SECRET_PATTERNS = [
    re.compile(r"\btk[vh]_[A-Za-z0-9_\-]{8,}"),
    re.compile(r"(?i)(authorization['\"]?\s*[:=]\s*['\"]?bearer\s+)[^\s'\",]+"),
    re.compile(r"(?i)(password['\"]?\s*[:=]\s*['\"]?)[^\s'\",&]+"),
]


def redact(text: str) -> str:
    for pattern in _SECRET_PATTERNS:
        if pattern.groups:
            text = pattern.sub(lambda m: m.group(1) + "[redacted]", text)
        else:
            text = pattern.sub("[redacted]", text)
    return text


class RedactSecretsFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = redact(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        return True
