"""Two-factor authentication (allauth's MFA): TOTP enrolment with a code an authenticator app
would show (pyotp), the login's code step, codes limited like passwords, recovery codes, the
secret encrypted at rest, and a team that requires two-factor of its members."""

from __future__ import annotations

from datetime import timedelta

import pyotp
import pytest
import time_machine
from allauth.mfa.models import Authenticator
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from accounts.models import Team
from tests.conftest import bearer, build_world, make_user

pytestmark = pytest.mark.django_db
RIGHT = "correct horse battery staple"  # tests.conftest.make_user's password


def _log_in(client: Client, user, password: str = RIGHT):
    return client.post(reverse("account_login"), {"login": user.email, "password": password})


def _enrol_totp(client: Client, user) -> pyotp.TOTP:
    """Log in with the password, open the set-up page (which asks for the password again),
    answer with the app's current code."""
    assert _log_in(client, user).status_code == 302
    asked = client.get(reverse("mfa_activate_totp"))
    assert asked["Location"].startswith(reverse("account_reauthenticate"))
    client.post(asked["Location"], {"password": RIGHT})
    page = client.get(reverse("mfa_activate_totp"))
    assert page.status_code == 200
    secret = client.session["mfa.totp.secret"]
    assert secret in page.content.decode()  # shown to type in by hand beside the QR code
    app = pyotp.TOTP(secret)
    done = client.post(reverse("mfa_activate_totp"), {"code": app.now()})
    assert done.status_code == 302, done.content.decode()[-1500:]
    return app


def test_after_totp_enrolment_the_login_asks_for_a_code():
    user = make_user("careful")
    app = _enrol_totp(Client(REMOTE_ADDR="198.51.100.31"), user)
    assert Authenticator.objects.filter(user=user, type="totp").exists()
    assert Authenticator.objects.filter(user=user, type="recovery_codes").exists()

    with time_machine.travel(timezone.now() + timedelta(seconds=31)):
        client = Client(REMOTE_ADDR="198.51.100.32")
        answer = _log_in(client, user)
        assert answer["Location"] == reverse("mfa_authenticate")
        assert "_auth_user_id" not in client.session  # the password alone is not enough
        assert client.get(reverse("home")).status_code == 302  # still sent to log in
        wrong = client.post(reverse("mfa_authenticate"), {"code": "000000"})
        assert wrong.status_code == 200 and "_auth_user_id" not in client.session
        right = client.post(reverse("mfa_authenticate"), {"code": app.now()})
        assert right.status_code == 302
        assert client.session["_auth_user_id"] == str(user.pk)


def test_the_totp_secret_is_encrypted_at_rest():
    user = make_user("secretive")
    app = _enrol_totp(Client(REMOTE_ADDR="198.51.100.33"), user)
    stored = Authenticator.objects.get(user=user, type="totp").data
    assert app.secret not in str(stored)


def test_two_factor_codes_are_limited_like_passwords():
    user = make_user("guessed")
    app = _enrol_totp(Client(REMOTE_ADDR="198.51.100.34"), user)
    with time_machine.travel(timezone.now() + timedelta(seconds=31)):
        client = Client(REMOTE_ADDR="198.51.100.35")
        _log_in(client, user)
        for i in range(10):
            client.post(reverse("mfa_authenticate"), {"code": f"{i:06d}"})
        refused = client.post(reverse("mfa_authenticate"), {"code": app.now()})
        assert "_auth_user_id" not in client.session
        assert "Too many" in refused.content.decode()


def test_a_recovery_code_logs_in_once():
    user = make_user("prepared")
    enrol = Client(REMOTE_ADDR="198.51.100.36")
    _enrol_totp(enrol, user)
    codes = Authenticator.objects.get(user=user, type="recovery_codes").wrap().get_unused_codes()
    first = Client(REMOTE_ADDR="198.51.100.37")
    _log_in(first, user)
    assert first.post(reverse("mfa_authenticate"), {"code": codes[0]}).status_code == 302
    again = Client(REMOTE_ADDR="198.51.100.38")
    _log_in(again, user)
    again.post(reverse("mfa_authenticate"), {"code": codes[0]})
    assert "_auth_user_id" not in again.session


def _require_two_factor(team: Team) -> None:
    Team.dangerously_unscoped.filter(pk=team.pk).update(require_two_factor=True)


def test_a_team_requiring_two_factor_sends_a_member_without_it_to_set_it_up():
    world = build_world()
    _require_two_factor(world.team)
    client = Client()
    client.force_login(world.member)
    for url in (reverse("team-dashboard", kwargs={"slug": world.team.slug}),
                reverse("team-members", kwargs={"slug": world.team.slug}),
                reverse("home")):
        answer = client.get(url)
        assert answer.status_code == 302 and answer["Location"] == reverse("mfa_index"), url
    page = client.get(reverse("mfa_index")).content.decode()
    assert "Acme requires two-factor authentication" in page
    # The API over the session is refused too (the scoping layer withholds the team) ...
    assert client.get(f"/api/v1/teams/{world.team.slug}/").status_code == 404
    # ... while the team's API tokens are unaffected.
    assert Client().get(f"/api/v1/teams/{world.team.slug}/",
                        **bearer(world.read_only_token)).status_code == 200


def test_a_member_with_two_factor_sees_the_team_that_requires_it():
    world = build_world()
    _require_two_factor(world.team)
    client = Client(REMOTE_ADDR="198.51.100.39")
    _enrol_totp(client, world.member)
    assert client.get(reverse("team-dashboard", kwargs={"slug": world.team.slug})).status_code == 200


def test_turning_the_requirement_on_needs_two_factor_of_whoever_does_it():
    world = build_world()
    client = Client()
    client.force_login(world.owner)
    settings_url = reverse("team-settings", kwargs={"slug": world.team.slug})
    answer = client.post(settings_url, {"require_two_factor": "on"}, follow=True)
    assert "Set up two-factor authentication for yourself first" in answer.content.decode()
    assert not Team.dangerously_unscoped.get(pk=world.team.pk).require_two_factor

    enrolled = Client(REMOTE_ADDR="198.51.100.40")
    _enrol_totp(enrolled, world.owner)
    enrolled.post(settings_url, {"require_two_factor": "on"})
    assert Team.dangerously_unscoped.get(pk=world.team.pk).require_two_factor
    assert enrolled.get(settings_url).status_code == 200  # the owner still gets in
