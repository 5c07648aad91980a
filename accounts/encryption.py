"""Secrets at rest (endpoint API keys, prompt samples, webhook secrets): Fernet.

The key comes from FIELD_ENCRYPTION_KEY (a comma-separated list: the first encrypts, all
decrypt, so keys can be rotated); when unset it is generated once into var/field_key.
"""

from __future__ import annotations

from functools import cache

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings


class UnreadableSecret(Exception):
    """Stored ciphertext that no configured key can decrypt."""


@cache
def _fernet() -> MultiFernet:
    return MultiFernet([Fernet(key) for key in settings.FIELD_ENCRYPTION_KEYS])


def encrypt(plaintext: str) -> str:
    if not plaintext:
        return ""
    return _fernet().encrypt(plaintext.encode()).decode()


def decrypt(ciphertext: str) -> str:
    if not ciphertext:
        return ""
    try:
        return _fernet().decrypt(ciphertext.encode()).decode()
    except InvalidToken:
        raise UnreadableSecret("stored secret cannot be decrypted with FIELD_ENCRYPTION_KEY") from None
