"""The development email backend: prints messages to the console with their secrets masked.

Invitation links carry a secret, and the console is a log (terminals are scrolled back, and
captured by process managers). Unless EMAIL_SHOW_SECRETS is on (for local development, where
you want to click the link), the printed message goes through the same redaction as the logs.
"""

from __future__ import annotations

import copy

from django.conf import settings
from django.core.mail import EmailMessage
from django.core.mail.backends import console

from common.logging import redact


class ConsoleEmailBackend(console.EmailBackend):
    def write_message(self, message: EmailMessage) -> None:
        if not settings.EMAIL_SHOW_SECRETS:
            message = copy.copy(message)
            message.subject = redact(str(message.subject))
            message.body = redact(str(message.body))
            # Only EmailMultiAlternatives declares alternatives; a plain message gets none.
            message.alternatives = [(redact(content), mimetype)  # type: ignore[attr-defined]
                                    for content, mimetype in getattr(message, "alternatives", [])]
        super().write_message(message)
