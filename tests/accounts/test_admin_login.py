"""The admin signs in through the site's own login, two-factor included: a staff account's
password alone opens neither /admin/ nor a team's pages, by any login URL."""

from __future__ import annotations

import pyotp
import pytest
from allauth.mfa.recovery_codes.internal.auth import RecoveryCodes
from allauth.mfa.totp.internal.auth import TOTP, generate_totp_secret
from django.test import Client
from django.urls import reverse

from accounts import teams
from tests.conftest import make_user

pytestmark = pytest.mark.django_db
RIGHT = "correct horse battery staple"  # tests.conftest.make_user's password

# Every URL that takes a password, or might: the site's login, Django's admin login, and where
# allauth's and DRF's login pages would be had they been mounted under their usual prefixes.
LOGIN_URLS = ["/admin/login/", "/admin/login/?next=/admin/", "/login/", "/login/?next=/admin/",
              "/accounts/login/", "/api-auth/login/", "/api/v1/auth/login/", "/reauthenticate/"]


def _staff_with_totp():
    user = make_user("staffer")
    user.is_staff = user.is_superuser = True
    user.save(update_fields=["is_staff", "is_superuser"])
    secret = generate_totp_secret()
    TOTP.activate(user, secret)
    RecoveryCodes.activate(user)
    team = teams.create_team("staff-team", "Staff team", owner=user)
    return user, team, pyotp.TOTP(secret)


def _what_the_password_opens(client: Client, team) -> dict[str, int]:
    """The status of each protected page for this client (200: open to it)."""
    return {
        "admin": client.get("/admin/").status_code,
        "admin tokens": client.get("/admin/accounts/apitoken/").status_code,
        "team page": client.get(reverse("team-members", kwargs={"slug": team.slug})).status_code,
        "token page": client.get(reverse("team-tokens", kwargs={"slug": team.slug})).status_code,
        "new token": client.post(reverse("token-create", kwargs={"slug": team.slug}),
                                 {"name": "ci", "scope": "read-write"}).status_code,
    }


@pytest.mark.parametrize("url", LOGIN_URLS)
@pytest.mark.parametrize("identifier", ["email", "username"])
def test_a_staff_password_without_its_code_opens_nothing_by_any_login_url(url, identifier):
    user, team, _ = _staff_with_totp()
    client = Client(REMOTE_ADDR="198.51.100.61")
    typed = getattr(user, identifier)
    client.get(url)
    client.post(url, {"username": typed, "login": typed, "password": RIGHT, "next": "/admin/"})

    assert "_auth_user_id" not in client.session
    opened = _what_the_password_opens(client, team)
    assert not [page for page, status in opened.items() if status == 200], opened
    assert not team.api_tokens.exists()


def test_the_admin_login_sends_to_the_site_login_which_asks_for_the_code():
    user, team, app = _staff_with_totp()
    client = Client(REMOTE_ADDR="198.51.100.62")

    sent = client.get("/admin/login/?next=/admin/")
    assert sent.status_code == 302
    assert sent["Location"].startswith(reverse("account_login"))
    asked = client.post(sent["Location"], {"login": user.email, "password": RIGHT})
    assert asked["Location"] == reverse("mfa_authenticate")
    assert client.get("/admin/").status_code == 302  # the password alone: not yet

    done = client.post(reverse("mfa_authenticate"), {"code": app.now()})
    assert done.status_code == 302 and done["Location"] == "/admin/"
    assert client.get("/admin/").status_code == 200  # with the code, the admin opens


def test_a_signed_in_account_that_is_not_staff_gets_no_admin_login_form():
    user = make_user("plain")
    client = Client(REMOTE_ADDR="198.51.100.63")
    client.post(reverse("account_login"), {"login": user.email, "password": RIGHT})
    assert client.get("/admin/").status_code == 302
    assert client.get("/admin/login/").status_code == 403
