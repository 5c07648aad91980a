"""While the shared cache is down, allauth's record of used TOTP codes is kept in the web
process (accounts/adapter.py). Rate-limit keys written in that process meanwhile (one per
sign-in attempt, anyone can make many) must not push those marks out: a code once used is
refused again for as long as it is valid."""

from __future__ import annotations

import pyotp
import pytest
from allauth.core.internal import ratelimit
from allauth.mfa.totp.internal.auth import TOTP, generate_totp_secret
from django.test import override_settings

from tests.conftest import free_port, make_user

pytestmark = pytest.mark.django_db


def test_a_used_code_stays_used_however_many_rate_limit_keys_the_outage_writes():
    user = make_user("replay-during-outage")
    secret = generate_totp_secret()
    totp = TOTP.activate(user, secret)
    down = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache",
                        "LOCATION": f"redis://127.0.0.1:{free_port()}/1"}}  # nothing listens
    with override_settings(CACHES=down):
        code = pyotp.TOTP(secret).now()
        assert totp.validate_code(code)  # the first use signs in
        assert not totp.validate_code(code)  # and at once it is used
        # A flood of sign-in attempts, each limit key written through allauth's limiter's cache
        # (which falls back to this process too), more than the fallback store holds.
        for i in range(12_000):
            ratelimit.cache.set(f"allauth:rl:login:ip:flood-{i}", [1.0], 300)

        assert not totp.validate_code(code)
