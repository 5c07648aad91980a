"""One account owns at most TEAMS_PER_ACCOUNT teams: every team has budgets of its own (pushed
report bytes, job submissions), so an account that could make teams at will could multiply them.
The page says why a team past the cap is not made, and makes none; joining another team by
invitation is not creating one and is never refused."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse

from accounts import teams
from accounts.models import Membership, Role, Team
from tests.conftest import make_user

pytestmark = pytest.mark.django_db


def _as(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_an_account_past_its_team_cap_is_told_why_and_no_team_is_made(settings):
    settings.TEAMS_PER_ACCOUNT = 2
    user = make_user("serial-founder")
    client = _as(user)
    for name in ("First", "Second"):
        assert client.post(reverse("team-create"), {"name": name}).status_code == 302

    refused = client.post(reverse("team-create"), {"name": "Third"})

    assert refused.status_code == 400
    text = refused.content.decode()
    assert "You already own or administer 2 teams, the most one account may" in text
    assert not Team.dangerously_unscoped.filter(name="Third").exists()
    assert Membership.dangerously_unscoped.filter(user=user, role=Role.OWNER).count() == 2


def test_the_cap_counts_each_account_on_its_own(settings):
    settings.TEAMS_PER_ACCOUNT = 1
    first, second = make_user("first-founder"), make_user("second-founder")
    teams.create_team("first-own", "First's", owner=first)
    with pytest.raises(teams.TeamCapReached):
        teams.create_team("first-more", "First's more", owner=first)
    assert teams.create_team("second-own", "Second's", owner=second).slug == "second-own"
    # Being a member of another account's team neither counts against the cap nor lifts it.
    Membership.dangerously_unscoped.create(team=Team.dangerously_unscoped.get(slug="second-own"),
                                           user=first, role=Role.MEMBER)
    with pytest.raises(teams.TeamCapReached):
        teams.create_team("first-again", "First's again", owner=first)


def test_the_operator_command_says_why_too(settings):
    settings.TEAMS_PER_ACCOUNT = 1
    call_command("createteam", "op-one", "--owner", "op@example.test")
    with pytest.raises(CommandError, match="already own or administer 1 team"):
        call_command("createteam", "op-two", "--owner", "op@example.test")


def test_handing_ownership_over_and_staying_admin_does_not_lift_the_cap(settings):
    # An owner who makes a second account owner and steps down to admin keeps full use of the
    # team (and its budgets): it still counts against the cap.
    settings.TEAMS_PER_ACCOUNT = 1
    founder, friend = make_user("hand-over-founder"), make_user("hand-over-friend")
    team = teams.create_team("handed-over", "Handed over", owner=founder)
    friend_row = Membership.dangerously_unscoped.create(team=team, user=friend, role=Role.MEMBER)
    teams.change_role(friend_row, Role.OWNER)
    teams.change_role(Membership.dangerously_unscoped.get(team=team, user=founder), Role.ADMIN)

    with pytest.raises(teams.TeamCapReached, match="own or administer 1 team"):
        teams.create_team("handed-over-2", "Second", owner=founder)
    assert not Team.dangerously_unscoped.filter(slug="handed-over-2").exists()
