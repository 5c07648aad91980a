"""How django-allauth behaves on this site (ACCOUNT_ADAPTER and MFA_ADAPTER in settings).

- Self sign-up follows the SIGNUP_OPEN setting; invitations make accounts either way
  (accounts.views.invite_accept does not go through allauth's sign-up).
- Password failures are counted once, by django-axes in the database
  (common/login_throttle.py); allauth's own per-key counter is left to two-factor codes.
- Two-factor secrets (the TOTP key, the recovery codes' seed) are encrypted at rest like the
  other secrets (accounts/encryption.py).
- allauth's rate limits and its record of used TOTP codes live in the shared cache; while that
  cannot be reached they are kept in the web process instead (FallbackCache), so logging in
  keeps working through a cache outage and the limits still count.
"""

from __future__ import annotations

from typing import Any

from allauth.account.adapter import DefaultAccountAdapter
from allauth.mfa.adapter import DefaultMFAAdapter
from django.conf import settings
from django.core.cache import cache
from django.core.cache.backends.locmem import LocMemCache
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest

from accounts import encryption
from common import client_address
from common.cache_outage import CACHE_ERRORS, warn


class AccountAdapter(DefaultAccountAdapter):
    def is_open_for_signup(self, request: HttpRequest) -> bool:
        return settings.SIGNUP_OPEN

    def pre_authenticate(self, request: HttpRequest, **credentials: Any) -> None:
        # Not allauth's login_failed counter for passwords: axes counts them (per account and
        # per address, in the database) and answers a locked-out sign-in with 429. Two counters
        # would disagree on when the lock starts.
        self._login_failed_rl_usage = None

    def get_client_ip(self, request: HttpRequest) -> str:
        # The address every other per-address count reads (TRUSTED_PROXY_COUNT), for
        # allauth's limits (two-factor codes, sign-up) too.
        return client_address.of_request(request) or super().get_client_ip(request)


class MFAAdapter(DefaultMFAAdapter):
    def encrypt(self, text: str) -> str:
        return encryption.encrypt(text)

    def decrypt(self, encrypted_text: str) -> str:
        return encryption.decrypt(encrypted_text)


class FallbackCache:
    """The shared cache, or, for a call that cannot reach it, a cache in this process.

    For allauth's rate limits and used-code marks: failing the login over them (a 500) would
    lock everyone out during an outage, and ignoring them would lift the limits. Counted per
    process meanwhile, a limit is looser (one count per web process), never gone. Each user
    gets a store of its own (`name`): rate-limit keys, which anyone can make by the thousand,
    must not evict the used-code marks (a code pushed out could be used again)."""

    def __init__(self, name: str, max_entries: int) -> None:
        self.local = LocMemCache(name, {"OPTIONS": {"MAX_ENTRIES": max_entries}})

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        try:
            return getattr(cache, method)(*args, **kwargs)
        except CACHE_ERRORS as exc:
            warn(f"allauth's limits counted in this process ({method})", exc)
            return getattr(self.local, method)(*args, **kwargs)

    def add(self, *args: Any, **kwargs: Any) -> bool:
        return self._call("add", *args, **kwargs)

    def get(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("get", *args, **kwargs)

    def set(self, *args: Any, **kwargs: Any) -> None:
        self._call("set", *args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> bool:
        return self._call("delete", *args, **kwargs)


def use_fallback_cache() -> None:
    """Give allauth's two cache users (its rate limiter, its TOTP replay check) the
    FallbackCache instead of the bare shared cache."""
    from allauth.core.internal import ratelimit
    from allauth.mfa.totp.internal import auth as totp

    stores = (
        (ratelimit, FallbackCache("allauth-fallback-ratelimit", 10_000)),
        # A mark is written only for a code that checked out and lives for the code's validity
        # (half a minute by default), so this store fills only with real sign-ins.
        (totp, FallbackCache("allauth-fallback-totp-used", 100_000)),
    )
    for module, fallback in stores:
        # Loudly, should an allauth upgrade stop reading the cache through this name.
        if not hasattr(module, "cache"):
            raise ImproperlyConfigured(f"{module.__name__} has no `cache`: see accounts/adapter.py")
        module.cache = fallback
