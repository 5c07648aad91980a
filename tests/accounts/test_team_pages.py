"""Teams in the UI: create (the creator owns it), rename, delete (what is lost spelled out,
confirmed by typing the name), invitations revoked and resent, the sole owner's row, and API
tokens with an expiry (refused through the API once it passes) and their last use."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
import time_machine
from django.core import mail
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from accounts import teams
from accounts.models import ApiToken, Invitation, Membership, Role, Team
from tests.conftest import bearer, build_world, make_user
from tests.helpers.factories import make_endpoint, make_scan

pytestmark = pytest.mark.django_db


def _as(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_a_new_team_is_owned_by_its_creator_and_becomes_current():
    user = make_user("founder")
    client = _as(user)
    answer = client.post(reverse("team-create"), {"name": "Night Shift", "slug": ""})
    team = Team.dangerously_unscoped.get(name="Night Shift")
    assert team.slug == "night-shift"
    assert answer["Location"] == reverse("team-dashboard", kwargs={"slug": "night-shift"})
    assert Membership.dangerously_unscoped.get(team=team, user=user).role == Role.OWNER
    assert client.get(reverse("home"))["Location"] == answer["Location"]
    # A second team of the same name gets its own slug.
    client.post(reverse("team-create"), {"name": "Night Shift"})
    assert Team.dangerously_unscoped.filter(slug="night-shift-2").exists()


def test_a_taken_slug_or_a_two_line_name_is_a_field_error():
    world = build_world()
    client = _as(make_user("second"))
    taken = client.post(reverse("team-create"), {"name": "Mine", "slug": world.team.slug})
    assert taken.status_code == 400 and "This slug is taken" in taken.content.decode()
    two_lines = client.post(reverse("team-create"), {"name": "Acme\nInc"})
    assert two_lines.status_code == 400 and "one line" in two_lines.content.decode()
    assert not Team.dangerously_unscoped.filter(name__startswith="Mine").exists()


def test_rename_keeps_the_slug():
    world = build_world()
    _as(world.owner).post(reverse("team-rename", kwargs={"slug": world.team.slug}),
                          {"name": "Acme Labs"})
    team = Team.dangerously_unscoped.get(pk=world.team.pk)
    assert (team.name, team.slug) == ("Acme Labs", world.team.slug)
    refused = _as(world.admin).post(reverse("team-rename", kwargs={"slug": world.team.slug}),
                                    {"name": "Admin's name"})
    assert refused.status_code == 403  # the team itself is its owners'
    assert Team.dangerously_unscoped.get(pk=world.team.pk).name == "Acme Labs"


def test_delete_spells_out_what_is_lost_and_needs_the_name_typed():
    world = build_world()
    endpoint = make_endpoint(world.team)
    make_scan(endpoint)
    make_scan(endpoint)
    client = _as(world.owner)
    url = reverse("team-delete", kwargs={"slug": world.team.slug})
    page = client.get(url).content.decode()
    lost = dict(re.findall(r'data-lost="([^"]+)"><strong>(\d+)</strong>', page))
    assert lost["scans"] == "2" and lost["endpoints"] == "1"
    assert lost["memberships"] == "5" and lost["api tokens"] == "2"
    # The other team's rows are not counted (a team starts with its email channel).
    # Its audit log goes with it: its making and its token's issue.
    assert teams.what_deleting_loses(world.other_team) == [
        ("audit entries", 2), ("api tokens", 1), ("memberships", 1),
        ("notification channels", 1)]

    wrong = client.post(url, {"confirm_name": "acme"})
    assert wrong.status_code == 400 and "exactly to confirm" in wrong.content.decode()
    assert Team.dangerously_unscoped.filter(pk=world.team.pk).exists()
    assert client.post(url, {"confirm_name": "Acme"})["Location"] == reverse("home")
    assert not Team.dangerously_unscoped.filter(pk=world.team.pk).exists()
    assert Team.dangerously_unscoped.filter(pk=world.other_team.pk).exists()
    # Its tokens stop working at once.
    assert Client().get(reverse("api-whoami"), **bearer(world.read_only_token)).status_code == 401


def test_delete_counts_the_notification_channels_and_each_alert_and_delivery_once():
    from scans.models import NotificationChannel
    from scans.notify import alerts
    from scans.notify.channels import delivery
    from tests.helpers.factories import make_channel

    world = build_world()
    make_channel(world.team, "webhook", name="hook", url="https://hooks.example.test/x")
    endpoint = make_endpoint(world.team)
    scan = make_scan(endpoint)
    delivery.record(endpoint, scan, "down", alerts.payload(endpoint, scan, "down", "down"))
    delivery.send_test(NotificationChannel.dangerously_unscoped.get(team=world.team, name="hook"),
                       queue=False)
    page = _as(world.owner).get(reverse("team-delete", kwargs={"slug": world.team.slug}))
    lost = dict(re.findall(r'data-lost="([^"]+)"><strong>(\d+)</strong>', page.content.decode()))
    # email and webhook; the down alert (to both) and the test message (to one), counted once
    # each though a delivery hangs on its channel and on its alert
    assert (lost["notification channels"], lost["alert events"], lost["deliveries"]) == ("2", "2", "3")


def test_only_an_owner_is_offered_or_allowed_delete():
    world = build_world()
    admin = _as(world.admin)
    assert 'href="/teams/' + world.team.slug + '/delete"' not in admin.get(
        reverse("team-settings", kwargs={"slug": world.team.slug})).content.decode()
    assert admin.post(reverse("team-delete", kwargs={"slug": world.team.slug}),
                      {"confirm_name": "Acme"}).status_code == 403


def test_open_invitations_are_listed_and_can_be_revoked_or_resent():
    world = build_world()
    client = _as(world.owner)
    members = reverse("team-members", kwargs={"slug": world.team.slug})
    client.post(reverse("member-invite", kwargs={"slug": world.team.slug}),
                {"email": "pat@example.test", "role": "member"})
    first_link = re.search(r"/invites/(\S+)/", mail.outbox[-1].body).group(0)
    page = client.get(members).content.decode()
    assert 'data-invitation="pat@example.test"' in page and "Revoke" in page and "Resend" in page
    invitation = Invitation.dangerously_unscoped.get(team=world.team, email="pat@example.test")

    again = client.post(reverse("member-invite", kwargs={"slug": world.team.slug}),
                        {"email": "pat@example.test", "role": "member"}, follow=True)
    assert "already has an open invitation" in again.content.decode()

    client.post(reverse("invitation-resend", kwargs={"slug": world.team.slug,
                                                     "public_id": invitation.public_id}))
    second_link = re.search(r"/invites/(\S+)/", mail.outbox[-1].body).group(0)
    assert second_link != first_link
    assert Client().get(first_link).status_code == 404  # the old link stopped working
    assert Client().get(second_link).status_code == 200

    client.post(reverse("invitation-revoke", kwargs={"slug": world.team.slug,
                                                     "public_id": invitation.public_id}))
    assert Client().get(second_link).status_code == 404
    assert 'data-invitation="pat@example.test"' not in client.get(members).content.decode()


def test_the_sole_owner_is_offered_neither_leave_nor_another_role():
    world = build_world()
    page = _as(world.owner).get(reverse("team-members", kwargs={"slug": world.team.slug})).content.decode()
    row = re.search(rf'<tr data-member="{world.owner.username}">.*?</tr>', page, re.S).group(0)
    assert "Leave team" not in row and "<select" not in row
    assert "data-sole-owner" in row
    # With a second owner, each may leave.
    Membership.dangerously_unscoped.filter(team=world.team, user=world.admin).update(role=Role.OWNER)
    page = _as(world.owner).get(reverse("team-members", kwargs={"slug": world.team.slug})).content.decode()
    row = re.search(rf'<tr data-member="{world.owner.username}">.*?</tr>', page, re.S).group(0)
    assert "Leave team" in row


def test_a_token_with_an_expiry_is_refused_by_the_api_once_it_passes():
    world = build_world()
    client = _as(world.owner)
    created = client.post(reverse("token-create", kwargs={"slug": world.team.slug}),
                          {"name": "ci", "scope": "read-only", "expires_in_days": "7"})
    body = created.content.decode()
    secret = re.search(r'id="new-token">(tkv_[^<]+)<', body).group(1)
    assert "data-copy-from" in body and "copy-secret.js" in body  # the copy button
    token = ApiToken.dangerously_unscoped.get(team=world.team, name="ci")
    assert token.expires_at - timezone.now() == pytest.approx(timedelta(days=7), abs=timedelta(minutes=1))

    api = Client()
    assert api.get(reverse("api-whoami"), **bearer(secret)).status_code == 200
    with time_machine.travel(token.expires_at + timedelta(seconds=1)):
        refused = api.get(reverse("api-whoami"), **bearer(secret))
        assert refused.status_code == 401
        assert "revoked or expired" in refused.json()["detail"]
        tokens = client.get(reverse("team-tokens", kwargs={"slug": world.team.slug})).content.decode()
    row = re.search(rf'<tr data-token-prefix="{token.prefix}">.*?</tr>', tokens, re.S).group(0)
    assert "expired" in row and "never" not in row.split("data-last-used>")[1][:10]


def test_a_token_without_expiry_never_expires_and_shows_its_last_use():
    world = build_world()
    client = _as(world.owner)
    client.post(reverse("token-create", kwargs={"slug": world.team.slug}),
                {"name": "forever", "scope": "read-only", "expires_in_days": ""})
    token = ApiToken.dangerously_unscoped.get(team=world.team, name="forever")
    assert token.expires_at is None
    Client().get(reverse("api-whoami"), **bearer(world.read_only_token))
    used = ApiToken.dangerously_unscoped.get(prefix=world.read_only_token[:12])
    page = client.get(reverse("team-tokens", kwargs={"slug": world.team.slug})).content.decode()
    row = re.search(rf'<tr data-token-prefix="{used.prefix}">.*?</tr>', page, re.S).group(0)
    assert used.last_used_at.strftime("%Y-%m-%d") in row.split("data-last-used>")[1]


def test_an_unknown_expiry_is_a_field_error():
    world = build_world()
    answer = _as(world.owner).post(reverse("token-create", kwargs={"slug": world.team.slug}),
                                   {"name": "odd", "scope": "read-only", "expires_in_days": "3"})
    assert answer.status_code == 400 and 'data-field="expires_in_days"' in answer.content.decode()
    assert not ApiToken.dangerously_unscoped.filter(name="odd").exists()
