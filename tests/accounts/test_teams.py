"""Teams: roles, the last-owner rule, invitations by single-use expiring link, switching."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
import time_machine
from django.core import mail
from django.urls import reverse
from django.utils import timezone

from accounts.models import Membership, Role
from tests.conftest import make_user

pytestmark = pytest.mark.django_db


def _membership(world, user):
    return Membership.dangerously_unscoped.get(team=world.team, user=user)


def _invite(client, world, email="newcomer@example.test", role="viewer") -> str:
    client.force_login(world.owner)
    client.post(reverse("member-invite", kwargs={"slug": world.team.slug}),
                {"email": email, "role": role})
    link = re.search(r"http://\S+/invites/(\S+)/", mail.outbox[-1].body)
    assert link, mail.outbox[-1].body
    client.logout()
    return reverse("invite-accept", kwargs={"secret": link.group(1)})


def test_last_owner_cannot_leave(world, client):
    client.force_login(world.owner)
    mine = _membership(world, world.owner)
    response = client.post(
        reverse("member-remove", kwargs={"slug": world.team.slug, "public_id": mine.public_id}),
        follow=True,
    )
    assert "last owner cannot leave" in response.content.decode()
    assert Membership.dangerously_unscoped.filter(pk=mine.pk).exists()


def test_last_owner_cannot_be_demoted(world, client):
    client.force_login(world.admin)
    owner = _membership(world, world.owner)
    client.post(
        reverse("member-role", kwargs={"slug": world.team.slug, "public_id": owner.public_id}),
        {"role": "member"},
    )
    owner.refresh_from_db()
    assert owner.role == Role.OWNER


def test_an_owner_can_leave_once_there_is_another_owner(world, client):
    client.force_login(world.owner)
    admin = _membership(world, world.admin)
    client.post(
        reverse("member-role", kwargs={"slug": world.team.slug, "public_id": admin.public_id}),
        {"role": "owner"},
    )
    mine = _membership(world, world.owner)
    response = client.post(
        reverse("member-remove", kwargs={"slug": world.team.slug, "public_id": mine.public_id})
    )
    assert response.status_code == 302
    assert not Membership.dangerously_unscoped.filter(pk=mine.pk).exists()


def test_an_admin_cannot_make_someone_owner(world, client):
    client.force_login(world.admin)
    target = _membership(world, world.target)
    response = client.post(
        reverse("member-role", kwargs={"slug": world.team.slug, "public_id": target.public_id}),
        {"role": "owner"},
    )
    assert response.status_code == 403
    target.refresh_from_db()
    assert target.role == Role.MEMBER


def test_a_viewer_can_leave_on_their_own(world, client):
    client.force_login(world.viewer)
    mine = _membership(world, world.viewer)
    client.post(
        reverse("member-remove", kwargs={"slug": world.team.slug, "public_id": mine.public_id})
    )
    assert not Membership.dangerously_unscoped.filter(pk=mine.pk).exists()


def test_unknown_role_changes_nothing(world, client):
    client.force_login(world.owner)
    target = _membership(world, world.target)
    client.post(
        reverse("member-role", kwargs={"slug": world.team.slug, "public_id": target.public_id}),
        {"role": "superuser"},
    )
    target.refresh_from_db()
    assert target.role == Role.MEMBER


def test_invitation_link_makes_a_new_account_a_member_with_the_role(world, client):
    url = _invite(client, world)
    page = client.get(url)
    assert page.status_code == 200 and "Join Acme" in page.content.decode()
    response = client.post(url, {"new_password1": "a long enough passphrase",
                                 "new_password2": "a long enough passphrase"})
    assert response.status_code == 302
    membership = Membership.dangerously_unscoped.get(team=world.team,
                                                      user__email="newcomer@example.test")
    assert membership.role == Role.VIEWER
    # and the newcomer is logged in and sees the team
    assert client.get(reverse("team-dashboard", kwargs={"slug": world.team.slug})).status_code == 200


def test_invitation_link_works_once(world, client):
    url = _invite(client, world)
    client.post(url, {"new_password1": "a long enough passphrase",
                      "new_password2": "a long enough passphrase"})
    client.logout()
    again = client.get(url)
    assert again.status_code == 404
    assert "already been used" in again.content.decode()


def test_invitation_link_expires(world, client, settings):
    url = _invite(client, world)
    later = timezone.now() + timedelta(hours=settings.INVITE_MAX_AGE_HOURS, minutes=1)
    with time_machine.travel(later):
        assert client.get(url).status_code == 404


def test_existing_user_logs_in_to_accept(world, client):
    existing = make_user("already-here")
    url = _invite(client, world, email=existing.email, role="member")
    response = client.get(url)
    assert response.status_code == 302 and response["Location"].startswith(reverse("account_login"))
    client.force_login(existing)
    client.post(url)
    assert _membership(world, existing).role == Role.MEMBER


def test_mismatched_passwords_create_nothing(world, client):
    url = _invite(client, world)
    response = client.post(url, {"new_password1": "a long enough passphrase",
                                 "new_password2": "something else entirely"})
    assert response.status_code == 400
    assert not Membership.dangerously_unscoped.filter(user__email="newcomer@example.test").exists()
    assert client.get(url).status_code == 200  # the link is still good


def test_a_user_in_two_teams_switches_between_them(world, client):
    from accounts import teams

    second = teams.create_team("second-team", "Second Team", owner=world.member)
    client.force_login(world.member)
    client.post(reverse("team-switch", kwargs={"slug": second.slug}))
    assert client.get(reverse("home"))["Location"] == reverse("team-dashboard",
                                                               kwargs={"slug": second.slug})
    client.post(reverse("team-switch", kwargs={"slug": world.team.slug}))
    assert client.get(reverse("home"))["Location"] == reverse("team-dashboard",
                                                               kwargs={"slug": world.team.slug})
    page = client.get(reverse("team-dashboard", kwargs={"slug": world.team.slug})).content.decode()
    assert "Second Team" in page and "Acme" in page  # the switcher lists both


def test_a_user_without_a_team_is_told_so(client, db):
    client.force_login(make_user("lonely"))
    response = client.get(reverse("home"))
    assert "No team yet" in response.content.decode()


def test_an_admin_cannot_invite_an_owner(world, client):
    client.force_login(world.admin)
    response = client.post(reverse("member-invite", kwargs={"slug": world.team.slug}),
                           {"email": "sidekick@example.test", "role": "owner"})
    assert response.status_code == 403
    assert not mail.outbox


def test_an_admin_cannot_demote_or_remove_an_owner(world, client):
    second_owner = make_user("second-owner")
    Membership.dangerously_unscoped.create(team=world.team, user=second_owner, role=Role.OWNER)
    client.force_login(world.admin)
    owner = _membership(world, world.owner)
    kwargs = {"slug": world.team.slug, "public_id": owner.public_id}
    assert client.post(reverse("member-role", kwargs=kwargs), {"role": "viewer"}).status_code == 403
    assert client.post(reverse("member-remove", kwargs=kwargs)).status_code == 403
    owner.refresh_from_db()
    assert owner.role == Role.OWNER
    client.force_login(second_owner)  # an owner still can
    client.post(reverse("member-role", kwargs=kwargs), {"role": "viewer"})
    owner.refresh_from_db()
    assert owner.role == Role.VIEWER


def test_the_invitation_link_is_not_flashed_back_to_the_inviter(world, client):
    client.force_login(world.owner)
    response = client.post(reverse("member-invite", kwargs={"slug": world.team.slug}),
                           {"email": "x@example.test", "role": "member"}, follow=True)
    secret_path = re.search(r"/invites/\S+/", mail.outbox[-1].body).group(0)
    assert secret_path not in response.content.decode()
