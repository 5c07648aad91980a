"""How django-allauth behaves on this site (ACCOUNT_ADAPTER and MFA_ADAPTER in settings).

- Self sign-up follows the SIGNUP_OPEN setting; invitations make accounts either way
  (accounts.views.invite_accept does not go through allauth's sign-up).
- Password failures are counted once, by django-axes in the database
  (tokvera_site/login_throttle.py); allauth's own per-key counter is left to two-factor codes.
- Two-factor secrets (the TOTP key, the recovery codes' seed) are encrypted at rest like the
  other secrets (accounts/encryption.py).
"""

from __future__ import annotations

from allauth.account.adapter import DefaultAccountAdapter
from allauth.mfa.adapter import DefaultMFAAdapter
from django.conf import settings

from accounts import encryption


class AccountAdapter(DefaultAccountAdapter):
    def is_open_for_signup(self, request) -> bool:
        return settings.SIGNUP_OPEN

    def pre_authenticate(self, request, **credentials) -> None:
        # Not allauth's login_failed counter for passwords: axes counts them (per account and
        # per address, in the database) and answers a locked-out sign-in with 429. Two counters
        # would disagree on when the lock starts.
        self._login_failed_rl_usage = None


class MFAAdapter(DefaultMFAAdapter):
    def encrypt(self, text: str) -> str:
        return encryption.encrypt(text)

    def decrypt(self, encrypted_text: str) -> str:
        return encryption.decrypt(encrypted_text)
