"""An account made with someone else's address before they arrive (a pre-account takeover)
never becomes the attacker's: the mails the address's owner gets prove nothing for a password
someone else chose, and an invitation's link lets its owner set their own."""

from __future__ import annotations

import re
import uuid
from datetime import timedelta

import pytest
import time_machine
from django.core import mail
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from accounts.models import Membership, Role
from tests.accounts.test_invitations import invite_link

pytestmark = pytest.mark.django_db
ATTACKERS, VICTIMS = "attacker's passphrase 1", "the invitee's own passphrase"


@pytest.fixture
def victim() -> str:
    """The invitee's address, new in each test: allauth limits mails per address in the
    shared cache, which outlives a test."""
    return f"new-admin-{uuid.uuid4().hex[:8]}@example.test"


def _mails_to(address: str) -> list:
    return [m for m in mail.outbox if address in m.to]


def _log_in(client: Client, address: str, password: str):
    return client.post(reverse("account_login"), {"login": address, "password": password})


def _does_what_the_mails_offer(mailbox: Client, address: str) -> None:
    """The invitee opens every site link the mails to their address carry (and confirms the
    page it shows), except the invitation itself."""
    for message in _mails_to(address):
        for path in re.findall(r"https?://[^/\s]+(/[^\s]*)", message.body):
            if path.startswith("/invites/"):
                continue
            page = mailbox.get(path)
            if page.status_code == 200:
                mailbox.post(path)


def test_an_account_signed_up_with_an_invitees_address_never_lets_its_maker_in(world, victim):
    invitation_url, _ = invite_link(world, victim, role=Role.ADMIN)

    attacker = Client(REMOTE_ADDR="203.0.113.71")
    attacker.post(reverse("account_signup"),
                  {"email": victim, "password1": ATTACKERS, "password2": ATTACKERS})
    assert "_auth_user_id" not in attacker.session

    mailbox = Client(REMOTE_ADDR="192.0.2.71")  # the invitee, in their own browser
    _does_what_the_mails_offer(mailbox, victim)
    # Whatever the invitee clicked, the attacker's password does not sign in.
    early = Client(REMOTE_ADDR="203.0.113.72")
    _log_in(early, victim, ATTACKERS)
    assert "_auth_user_id" not in early.session
    # The invitation link lets its owner choose the password and join in one step.
    page = mailbox.get(invitation_url)
    assert page.status_code == 200 and 'name="new_password1"' in page.content.decode()
    joined = mailbox.post(invitation_url, {"name": "Ines", "new_password1": VICTIMS,
                                           "new_password2": VICTIMS})
    assert joined.status_code == 302
    assert mailbox.session["_auth_user_id"]

    # The attacker's password no longer signs anyone in, from a new login or the pending one.
    again = Client(REMOTE_ADDR="203.0.113.75")
    assert _log_in(again, victim, ATTACKERS).status_code == 200
    assert "_auth_user_id" not in again.session
    for client in (attacker, again):
        assert client.get(invitation_url).status_code != 200 or "_auth_user_id" not in client.session
        assert client.get(reverse("team-members", kwargs={"slug": world.team.slug})).status_code == 302
        assert "_auth_user_id" not in client.session

    member = Membership.dangerously_unscoped.get(team=world.team, user__email=victim)
    assert member.role == Role.ADMIN
    assert member.user.check_password(VICTIMS) and not member.user.check_password(ATTACKERS)
    later = Client(REMOTE_ADDR="192.0.2.72")
    assert _log_in(later, victim, VICTIMS)["Location"] == reverse("home")


def test_the_verification_mail_cannot_prove_an_address_for_another_browser(victim):
    """What the owner of an address gets when someone signs up with it is a code for the
    browser that signed up, not a link that verifies the account from wherever it is opened."""
    attacker = Client(REMOTE_ADDR="203.0.113.73")
    attacker.post(reverse("account_signup"),
                  {"email": victim, "password1": ATTACKERS, "password2": ATTACKERS})

    _does_what_the_mails_offer(Client(REMOTE_ADDR="192.0.2.73"), victim)

    # A minute on (allauth sends an address one code per 10 s), the password alone still
    # only asks for a code, mailed to the address's owner.
    with time_machine.travel(timezone.now() + timedelta(minutes=1)):
        answer = _log_in(Client(REMOTE_ADDR="203.0.113.74"), victim, ATTACKERS)
    assert answer["Location"] == reverse("account_email_verification_sent")
    assert attacker.get(reverse("home")).status_code == 302
    assert "_auth_user_id" not in attacker.session


@pytest.mark.parametrize("kind", ["staff", "two_factor", "member", "signed_in"])
def test_an_invitation_link_never_sets_the_password_of_an_account_that_is_someones(
        world, victim, kind):
    """An account without a proven address row can still be someone's (an operator's
    `createsuperuser`, an account with a second factor, a team member, one that has signed in):
    a mailbox and an invitation link must not replace its password; its owner logs in."""
    from allauth.account.models import EmailAddress
    from allauth.mfa.models import Authenticator
    from django.contrib.auth import get_user_model

    from accounts import teams

    user = get_user_model().objects.create_user(username=f"u-{uuid.uuid4().hex[:8]}",
                                                email=victim, password=VICTIMS)
    if kind == "staff":
        user.is_staff = user.is_superuser = True
        user.save()
    else:  # a sign-up's unproven address row
        EmailAddress.objects.create(user=user, email=victim, verified=False, primary=True)
    if kind == "two_factor":
        Authenticator.objects.create(user=user, type=Authenticator.Type.TOTP, data={})
    elif kind == "member":
        teams.create_team(f"t-{uuid.uuid4().hex[:6]}", "Theirs", owner=user)
    elif kind == "signed_in":
        user.last_login = timezone.now()
        user.save(update_fields=["last_login"])
    invitation_url, _ = invite_link(world, victim, role=Role.ADMIN)

    mailbox = Client(REMOTE_ADDR="203.0.113.81")  # whoever reads that mailbox
    page = mailbox.get(invitation_url)
    assert page.status_code == 302 and page["Location"].startswith(reverse("account_login"))
    taken = mailbox.post(invitation_url, {"name": "x", "new_password1": ATTACKERS,
                                          "new_password2": ATTACKERS})
    assert taken.status_code == 302 and taken["Location"].startswith(reverse("account_login"))
    assert "_auth_user_id" not in mailbox.session
    user.refresh_from_db()
    assert user.check_password(VICTIMS) and not user.check_password(ATTACKERS)
    assert not Membership.dangerously_unscoped.filter(team=world.team, user=user).exists()
