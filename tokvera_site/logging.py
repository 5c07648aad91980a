"""A logging filter that masks secrets before any handler sees them."""

from __future__ import annotations

import logging

# One list of credential patterns for logs and for stored scan text (scans/grader/redaction.py).
from scans.grader.redaction import redact_patterns as redact

__all__ = ["ACCESS_LOGGERS", "RedactSecretsFilter", "redact", "redact_access_logs"]


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
