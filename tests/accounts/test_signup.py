"""Sign-up, email verification, password reset and change, the profile and its timezone, and the
sign-up switch, through the pages a person uses (django-allauth; mail in Django's outbox)."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
import time_machine
from django.core import mail
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from accounts.models import Membership
from tests.conftest import build_world, make_user

pytestmark = pytest.mark.django_db
PASSWORD = "a long enough passphrase"


def _link(pattern: str) -> str:
    """The path of the last mail's link that matches `pattern`."""
    found = re.search(rf"https?://[^/\s]+({pattern})", mail.outbox[-1].body)
    assert found, mail.outbox[-1].body
    return found.group(1)


def _log_in(client: Client, login: str, password: str):
    return client.post(reverse("account_login"), {"login": login, "password": password})


def _code() -> str:
    """The verification code of the last mail (a code to type, never a link)."""
    body = mail.outbox[-1].body
    assert "/confirm-email/" not in body
    found = re.search(r"^([A-Z0-9]{4}-[A-Z0-9]{4})$", body, re.MULTILINE)
    assert found, body
    return found.group(1)


def test_sign_up_sends_a_verification_code_and_the_account_logs_in_once_verified():
    visitor = Client(REMOTE_ADDR="192.0.2.11")
    signup = visitor.get(reverse("account_signup"))
    assert signup.status_code == 200 and 'name="email"' in signup.content.decode()
    answer = visitor.post(reverse("account_signup"), {
        "email": "Newcomer@Example.test", "password1": PASSWORD, "password2": PASSWORD})
    assert answer.status_code == 302
    assert answer["Location"] == reverse("account_email_verification_sent")
    assert "_auth_user_id" not in visitor.session  # not before the address is proven
    assert mail.outbox[-1].to == ["newcomer@example.test"]
    code = _code()
    page = visitor.get(answer["Location"])
    assert page.status_code == 200 and 'name="code"' in page.content.decode()

    # Logging in elsewhere before the code is typed only mails another code (one per 10 s).
    with time_machine.travel(timezone.now() + timedelta(minutes=1)):
        early = Client(REMOTE_ADDR="192.0.2.12")
        assert _log_in(early, "newcomer@example.test", PASSWORD)["Location"] == reverse(
            "account_email_verification_sent")
        assert "_auth_user_id" not in early.session
        assert early.post(reverse("account_email_verification_sent"), {"code": code}).status_code == 200
        assert "_auth_user_id" not in early.session  # the code works in its own browser only

    done = visitor.post(reverse("account_email_verification_sent"), {"code": code})
    assert done.status_code == 302 and done["Location"] == reverse("home")
    assert "_auth_user_id" in visitor.session

    later = Client(REMOTE_ADDR="192.0.2.14")
    answer = _log_in(later, "newcomer@example.test", PASSWORD)
    assert answer.status_code == 302 and answer["Location"] == reverse("home")
    home = later.get(reverse("home"))
    assert "No team yet" in home.content.decode()
    assert reverse("team-create") in home.content.decode()  # and the way out of it


def test_a_wrong_password_says_so_on_the_form():
    make_user("careful")
    answer = _log_in(Client(REMOTE_ADDR="192.0.2.15"), "careful@example.test", "not it")
    assert answer.status_code == 200
    assert "not correct" in answer.content.decode()


def test_an_address_already_taken_is_not_signed_up_twice():
    make_user("taken")
    Client(REMOTE_ADDR="192.0.2.16").post(reverse("account_signup"), {
        "email": "taken@example.test", "password1": PASSWORD, "password2": PASSWORD})
    from django.contrib.auth import get_user_model

    assert get_user_model().objects.filter(email__iexact="taken@example.test").count() == 1


def test_password_reset_mails_a_link_that_sets_a_new_password():
    make_user("forgetful")
    client = Client(REMOTE_ADDR="192.0.2.17")
    answer = client.post(reverse("account_reset_password"), {"email": "forgetful@example.test"})
    assert answer["Location"] == reverse("account_reset_password_done")
    link = _link(r"/password/reset/key/[^\s]+/")
    form = client.get(link, follow=True)
    assert form.status_code == 200 and 'name="password1"' in form.content.decode()
    set_url = form.redirect_chain[-1][0] if form.redirect_chain else link
    new = "a brand new passphrase"
    done = client.post(set_url, {"password1": new, "password2": new})
    assert done.status_code == 302
    assert "_auth_user_id" not in client.session  # a reset never signs in by itself
    fresh = Client(REMOTE_ADDR="192.0.2.18")
    assert _log_in(fresh, "forgetful@example.test", "correct horse battery staple").status_code == 200
    assert _log_in(fresh, "forgetful@example.test", "a brand new passphrase").status_code == 302


def test_password_reset_does_not_say_whether_an_address_has_an_account():
    make_user("known")
    client = Client(REMOTE_ADDR="192.0.2.19")
    known = client.post(reverse("account_reset_password"), {"email": "known@example.test"})
    unknown = client.post(reverse("account_reset_password"), {"email": "nobody@example.test"})
    assert (known.status_code, known["Location"]) == (unknown.status_code, unknown["Location"])
    # Both addresses get a mail; only the known one gets a reset link.
    assert [m.to for m in mail.outbox] == [["known@example.test"], ["nobody@example.test"]]
    assert "/password/reset/key/" in mail.outbox[0].body
    assert "/password/reset/key/" not in mail.outbox[1].body


def test_password_change_asks_for_the_old_one():
    user = make_user("changer")
    client = Client(REMOTE_ADDR="192.0.2.20")
    _log_in(client, "changer@example.test", "correct horse battery staple")
    wrong = client.post(reverse("account_change_password"), {
        "oldpassword": "guess", "password1": "another fine passphrase",
        "password2": "another fine passphrase"})
    assert wrong.status_code == 200
    client.post(reverse("account_change_password"), {
        "oldpassword": "correct horse battery staple", "password1": "another fine passphrase",
        "password2": "another fine passphrase"})
    user.refresh_from_db()
    assert user.check_password("another fine passphrase")


def test_the_profile_timezone_is_the_one_every_page_uses():
    world = build_world()
    client = Client()
    client.force_login(world.owner)
    tokens = reverse("team-tokens", kwargs={"slug": world.team.slug})
    assert "UTC" in client.get(tokens).content.decode()
    saved = client.post(reverse("profile"), {"name": "Ana Owner", "timezone": "Asia/Tokyo"})
    assert saved.status_code == 302
    page = client.get(tokens).content.decode()
    assert "JST" in page and "UTC" not in page  # the tokens' dates, in Tokyo time
    members = client.get(reverse("team-members", kwargs={"slug": world.team.slug})).content.decode()
    assert "Ana Owner" in members
    # Another user, and anonymous pages, are not moved to Tokyo.
    other = Client()
    other.force_login(world.admin)
    assert "JST" not in other.get(tokens).content.decode()


def test_the_endpoint_and_scan_pages_name_the_zone_their_times_are_in():
    """A time shown in the viewer's zone says which zone, never "UTC" after a Tokyo time."""
    from datetime import UTC, datetime

    from accounts.models import Profile
    from tests.helpers.factories import make_endpoint, make_scan

    world = build_world()
    Profile.objects.update_or_create(user=world.owner, defaults={"timezone": "Asia/Tokyo"})
    endpoint = make_endpoint(world.team, next_scan_at=datetime(2026, 12, 1, 3, 0, tzinfo=UTC))
    scan = make_scan(endpoint)
    client = Client()
    client.force_login(world.owner)
    for page in (client.get(reverse("endpoint-detail", args=[endpoint.public_id])),
                 client.get(reverse("scan-detail", args=[scan.public_id]))):
        assert page.status_code == 200
        # The page's own times; the embedded report.html is a file of its own, in UTC.
        body = page.content.decode().split('<iframe class="report"')[0]
        assert "JST" in body and " UTC" not in body
    assert "next at 2026-12-01 12:00 JST" in client.get(
        reverse("endpoint-detail", args=[endpoint.public_id])).content.decode()


def test_an_unknown_timezone_is_a_field_error():
    client = Client()
    client.force_login(make_user("traveller"))
    answer = client.post(reverse("profile"), {"name": "", "timezone": "Mars/Olympus_Mons"})
    assert answer.status_code == 200
    assert 'data-field="timezone"' in answer.content.decode()
    assert "Select a valid choice" in answer.content.decode()


def test_with_sign_up_closed_only_invitations_make_accounts(settings):
    settings.SIGNUP_OPEN = False
    visitor = Client(REMOTE_ADDR="192.0.2.21")
    closed = visitor.get(reverse("account_signup"))
    assert "closed" in closed.content.decode().lower()
    visitor.post(reverse("account_signup"), {
        "email": "uninvited@example.test", "password1": PASSWORD, "password2": PASSWORD})
    from django.contrib.auth import get_user_model

    assert not get_user_model().objects.filter(email="uninvited@example.test").exists()
    assert "Create an account" not in visitor.get(reverse("account_login")).content.decode()

    world = build_world()
    owner = Client()
    owner.force_login(world.owner)
    owner.post(reverse("member-invite", kwargs={"slug": world.team.slug}),
               {"email": "invited@example.test", "role": "member"})
    invite = _link(r"/invites/[^/\s]+/")
    form = visitor.get(invite).content.decode()
    assert 'class="field' in form and 'name="new_password1"' in form  # the site's styled form
    joined = visitor.post(invite, {"name": "Ivy", "new_password1": PASSWORD, "new_password2": PASSWORD})
    assert joined.status_code == 302
    assert Membership.dangerously_unscoped.filter(
        team=world.team, user__email="invited@example.test").exists()
    # The invited address was proven by the link: the new account logs in with a password.
    again = Client(REMOTE_ADDR="192.0.2.22")
    assert _log_in(again, "invited@example.test", PASSWORD)["Location"] == reverse("home")
