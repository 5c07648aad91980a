"""Bearer secrets shown once: team API tokens (tkv_…) and, later, host tokens (tkh_…).

A token is `<kind>_<random>`. We store its first characters as a lookup prefix and an HMAC of
the whole token keyed by SECRET_KEY; checking compares HMACs in constant time. The token
itself is never stored or logged. Rotating SECRET_KEY therefore revokes every token.
"""

from __future__ import annotations

import hmac
import secrets
from dataclasses import dataclass

from django.utils.crypto import salted_hmac

PREFIX_CHARS = 12  # "tkv_" + 8 random characters: enough to find the row, useless alone


@dataclass(frozen=True)
class NewSecret:
    token: str  # show once, then forget
    prefix: str
    digest: str


def digest(token: str) -> str:
    return salted_hmac("tokvera.bearer-token", token, algorithm="sha256").hexdigest()


def new_secret(kind: str) -> NewSecret:
    token = f"{kind}_{secrets.token_urlsafe(32)}"
    return NewSecret(token=token, prefix=token[:PREFIX_CHARS], digest=digest(token))


def split_bearer(header: str, kind: str) -> str | None:
    """The token from an `Authorization: Bearer <kind>_…` header, or None if it is not one."""
    scheme, _, token = header.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token.startswith(f"{kind}_"):
        return None
    if len(token) < PREFIX_CHARS + 8 or len(token) > 200:
        return None
    return token


def matches(token: str, stored_digest: str) -> bool:
    return hmac.compare_digest(digest(token), stored_digest)
