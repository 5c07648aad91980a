"""Logging in keeps working while the shared cache (Redis) is down: allauth's limits, which
keep their counts in the cache, fall back to counting in the web process instead of failing
the request; the password limit is axes', in the database, and holds as before."""

from __future__ import annotations

import os
import re

import httpx
import pyotp
import pytest
from allauth.mfa.recovery_codes.internal.auth import RecoveryCodes
from allauth.mfa.totp.internal.auth import TOTP, generate_totp_secret
from django.contrib.auth.hashers import PBKDF2PasswordHasher

from tests.conftest import database_url, free_port, make_user
from tests.helpers.processes import gunicorn

RIGHT = "correct horse battery staple"  # tests.conftest.make_user's password


def _user(name: str):
    """A user whose password the site's own hashers read (the tests hash with MD5 for speed)."""
    user = make_user(name)
    hasher = PBKDF2PasswordHasher()
    user.password = hasher.encode(RIGHT, hasher.salt())
    user.save(update_fields=["password"])
    return user


def _csrf(html: str) -> str:
    return re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', html)[1]


def _post_form(client: httpx.Client, path: str, data: dict) -> httpx.Response:
    page = client.get(path)
    assert page.status_code == 200, (path, page.status_code, page.text[-2000:])
    return client.post(path, data={**data, "csrfmiddlewaretoken": _csrf(page.text)})


@pytest.mark.django_db(transaction=True)
def test_login_and_its_two_factor_step_work_while_the_cache_is_down(tmp_path):
    plain = _user("plain-during-outage")
    careful = _user("careful-during-outage")
    secret = generate_totp_secret()
    TOTP.activate(careful, secret)
    RecoveryCodes.activate(careful)

    down = free_port()  # nothing listens there: the cache's Redis is down
    env = {**os.environ, "DATABASE_URL": database_url(), "CACHE_URL": f"redis://127.0.0.1:{down}/1",
           "DEBUG": "0", "SECRET_KEY": "cache-outage-" + "k" * 40, "ALLOWED_HOSTS": "127.0.0.1"}
    with gunicorn(env, log=tmp_path / "site.log") as site:

        with httpx.Client(base_url=site, trust_env=False, timeout=30) as browser:
            wrong = _post_form(browser, "/login/", {"login": plain.email, "password": "not it"})
            assert wrong.status_code == 200 and "not correct" in wrong.text
            right = _post_form(browser, "/login/", {"login": plain.email, "password": RIGHT})
            assert (right.status_code, right.headers["location"]) == (302, "/")
            assert "No team yet" in browser.get("/").text

        with httpx.Client(base_url=site, trust_env=False, timeout=30) as browser:
            asked = _post_form(browser, "/login/", {"login": careful.email, "password": RIGHT})
            assert (asked.status_code, asked.headers["location"]) == (302, "/2fa/authenticate/")
            done = _post_form(browser, "/2fa/authenticate/", {"code": pyotp.TOTP(secret).now()})
            assert (done.status_code, done.headers.get("location")) == (302, "/"), done.text[-1500:]
            assert "No team yet" in browser.get("/").text

        with httpx.Client(base_url=site, trust_env=False, timeout=30) as browser:
            _post_form(browser, "/login/", {"login": careful.email, "password": RIGHT})
            # The limit on codes still counts (in the web process): ten wrong codes, and the
            # eleventh is refused as too many, not judged.
            answers = [_post_form(browser, "/2fa/authenticate/", {"code": f"{i:06d}"})
                       for i in range(11)]
            assert [a.status_code for a in answers] == [200] * 11
            assert "Too many failed login attempts" not in answers[0].text
            assert "Too many failed login attempts" in answers[-1].text
            assert "No team yet" not in browser.get("/", follow_redirects=True).text
