"""A logging filter that masks secrets before any handler sees them."""

from __future__ import annotations

import logging
import re

# API tokens (tkv_…), host tokens (tkh_…), Authorization values (any scheme), bare bearer
# credentials, password fields and invitation links (whose path is the invitation's secret).
_SECRET_PATTERNS = [
    re.compile(r"\btk[vh]_[A-Za-z0-9_\-]{8,}"),
    re.compile(r"(?i)(authorization['\"]?\s*[:=]\s*['\"]?(?:[a-z]+\s+)?)[^\s'\",}\]]+"),
    re.compile(r"(?i)(\bbearer\s+)[A-Za-z0-9._~+/=\-]{6,}"),
    re.compile(r"(?i)(password['\"]?\s*[:=]\s*['\"]?)[^\s'\",&]+"),
    re.compile(r"(?i)((?:/|%2F)invites(?:/|%2F))[A-Za-z0-9_\-]{16,}"),
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


# The web servers' access logs (runserver, gunicorn) do not pass through our handlers, and
# their request lines carry invitation links: the filter goes on those loggers themselves.
ACCESS_LOGGERS = ("django.server", "gunicorn.access")


def redact_access_logs() -> None:
    for name in ACCESS_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, RedactSecretsFilter) for f in logger.filters):
            logger.addFilter(RedactSecretsFilter())
