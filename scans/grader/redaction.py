"""Secrets never stored from a response.

An upstream may echo what it was sent (its error body quoting the `Authorization` header, say),
and the site keeps error text in report.json (failure examples, request timelines) and on Scan
rows, where every viewer of the team can read it. Everything stored from a scan goes through
`redact_report` / `redact_text` first: the endpoint's own secrets are cut out wherever they
appear, and the patterns of tokvera_site.logging (Authorization values, bearer credentials,
tokens) are masked as in the logs.
"""

from __future__ import annotations

from collections.abc import Iterable

from tokvera_site.logging import redact as redact_patterns

MASK = "[redacted]"
# A secret cut short where an error body was truncated still leaks this much at most.
MIN_TAIL_PREFIX = 6


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


def endpoint_secrets(endpoint) -> list[str]:
    """The endpoint's stored secrets, decrypted in memory; an unreadable one is skipped."""
    from accounts import encryption

    secrets = []
    for field in ("api_key_encrypted", "webhook_secret_encrypted"):
        try:
            secret = encryption.decrypt(getattr(endpoint, field))
        except encryption.UnreadableSecret:
            continue
        if secret:
            secrets.append(secret)
    return secrets
