"""Single sign-on through an OpenID Connect provider (a real one on loopback: discovery, code
with PKCE, token, userinfo), as the site's operator configures it: a new person signs in and
lands in the teams their groups name with the role the map gives; their roles follow the
provider at each sign-in and go when it stops granting them (never those a team gave by hand,
never a team's last owner); an existing account with the address signs in through it; a team
that requires single sign-on shows nothing to a password session; bad configuration stops
start-up with one line."""

from __future__ import annotations

import subprocess
import sys
from urllib.parse import urlsplit

import pytest
import requests
from django.contrib.auth import get_user_model
from django.test import Client

from accounts.models import Membership, Role, Team
from audit.models import AuditEntry
from tests.conftest import make_user
from tests.helpers.oidc_provider import running_provider
from tests.helpers.paths import ROOT

pytestmark = pytest.mark.django_db


@pytest.fixture
def provider(settings, world):
    with running_provider() as idp:
        settings.SSO_APP = idp.app()
        settings.SOCIALACCOUNT_PROVIDERS = {"openid_connect": {"APPS": [settings.SSO_APP]}}
        settings.SSO_TEAMS_CLAIM = "groups"
        settings.SSO_TEAM_ROLES = {
            "ml-platform-admins": (world.team.slug, Role.ADMIN),
            "ml-platform": (world.team.slug, Role.MEMBER),
            "auditors": (world.team.slug, Role.VIEWER),
        }
        yield idp


def _sign_in(client: Client, provider, claims: dict) -> requests.Response:
    """What a browser does: the site's button, the provider's redirect, the site's callback."""
    provider.claims = claims
    start = client.post("/oidc/sso/login/")
    assert start.status_code == 302, start.content[:300]
    assert start["Location"].startswith(provider.url)
    back = requests.get(start["Location"], allow_redirects=False, timeout=5)
    assert back.status_code == 302
    callback = urlsplit(back.headers["Location"])
    return client.get(f"{callback.path}?{callback.query}")


def _role(user, team) -> str | None:
    membership = Membership.dangerously_unscoped.filter(user=user, team=team).first()
    return membership.role if membership else None


def test_a_new_person_signs_in_and_lands_in_the_team_their_groups_name(world, provider):
    client = Client()
    done = _sign_in(client, provider, {"sub": "u-1", "email": "ada@acme.example",
                                       "email_verified": True, "name": "Ada",
                                       "groups": ["ml-platform", "auditors", "unmapped"]})
    assert done.status_code == 302 and provider.token_requests == 1
    user = get_user_model().objects.get(email="ada@acme.example")
    assert _role(user, world.team) == Role.MEMBER  # the higher of editor and viewer
    assert client.get(f"/teams/{world.team.slug}/").status_code == 200
    entry = AuditEntry.dangerously_unscoped.get(team=world.team, object_type="member")
    assert entry.actor == "ada@acme.example" and entry.action == "create"


def test_roles_follow_the_provider_but_never_what_the_team_gave_by_hand(world, provider):
    claims = {"sub": "u-2", "email": "bo@acme.example", "email_verified": True,
              "groups": ["ml-platform-admins"]}
    _sign_in(Client(), provider, claims)
    user = get_user_model().objects.get(email="bo@acme.example")
    assert _role(user, world.team) == Role.ADMIN
    _sign_in(Client(), provider, {**claims, "groups": ["auditors"]})
    assert _role(user, world.team) == Role.VIEWER
    _sign_in(Client(), provider, {**claims, "groups": []})
    assert _role(user, world.team) is None  # the provider gave it, the provider took it

    invited = make_user("carol")
    Membership.dangerously_unscoped.create(team=world.team, user=invited, role=Role.ADMIN)
    _sign_in(Client(), provider, {"sub": "u-3", "email": invited.email,
                                  "email_verified": True, "groups": ["auditors"]})
    assert _role(invited, world.team) == Role.ADMIN  # the team's own membership stays as it is


def test_a_teams_last_owner_is_never_removed_by_the_provider(world, provider):
    lone = Team.dangerously_unscoped.create(slug="lone-team", name="Lone")
    provider_owner = {"sub": "u-4", "email": "dee@acme.example", "email_verified": True,
                      "groups": ["lone-owners"]}
    from django.conf import settings

    settings.SSO_TEAM_ROLES = {**settings.SSO_TEAM_ROLES, "lone-owners": ("lone-team", Role.OWNER)}
    _sign_in(Client(), provider, provider_owner)
    user = get_user_model().objects.get(email="dee@acme.example")
    assert _role(user, lone) == Role.OWNER
    _sign_in(Client(), provider, {**provider_owner, "groups": []})
    assert _role(user, lone) == Role.OWNER  # removing them would leave the team with no owner


def test_a_team_that_requires_sso_shows_nothing_to_a_password_session(world, provider):
    Team.dangerously_unscoped.filter(pk=world.team.pk).update(require_sso=True)
    password = Client()
    password.force_login(world.member)
    page = password.get(f"/teams/{world.team.slug}/")
    assert page.status_code == 302
    assert page["Location"] == f"/oidc/sso/login/?next=%2Fteams%2F{world.team.slug}%2F"
    assert password.get(f"/api/v1/endpoints/?team={world.team.slug}").json()["results"] == []

    sso = Client()
    _sign_in(sso, provider, {"sub": "u-5", "email": world.member.email, "email_verified": True,
                             "groups": []})
    assert sso.get(f"/teams/{world.team.slug}/").status_code == 200  # the same account, by SSO
    token = {"HTTP_AUTHORIZATION": f"Bearer {world.read_only_token}"}
    assert Client().get("/api/v1/endpoints/", **token).status_code == 200  # tokens unaffected


def test_only_a_member_signed_in_through_sso_may_require_it(world, provider):
    password = Client()
    password.force_login(world.owner)
    password.post(f"/teams/{world.team.slug}/settings/", {"require_sso": "on"})
    assert not Team.dangerously_unscoped.get(pk=world.team.pk).require_sso  # would lock them out
    sso = Client()
    _sign_in(sso, provider, {"sub": "u-6", "email": world.owner.email, "email_verified": True})
    sso.post(f"/teams/{world.team.slug}/settings/", {"require_sso": "on"})
    assert Team.dangerously_unscoped.get(pk=world.team.pk).require_sso


def test_the_login_page_offers_the_provider_only_when_configured(settings, provider):
    assert "Log in with Acme ID" in Client().get("/login/").content.decode()
    settings.SSO_APP = None
    assert "Log in with" not in Client().get("/login/").content.decode()


@pytest.mark.parametrize("env, says", [
    ({"OIDC_ISSUER": "https://id.example"}, "go together"),
    ({"OIDC_ISSUER": "id.example", "OIDC_CLIENT_ID": "x", "OIDC_CLIENT_SECRET": "y"},
     "OIDC_ISSUER='id.example' is not valid"),
    ({"OIDC_TEAM_ROLES": "ml=acme:superuser"}, "OIDC_TEAM_ROLES: 'ml=acme:superuser' is not valid"),
])
def test_bad_sso_configuration_stops_start_up_with_one_line(env, says):
    import os

    done = subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env={**os.environ, **env}, check=False)
    assert done.returncode == 2 and says in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_a_role_the_provider_gave_holds_only_in_a_session_it_vouched_for(world, provider):
    _sign_in(Client(), provider, {"sub": "u-7", "email": "fay@acme.example",
                                  "email_verified": True, "groups": ["ml-platform"]})
    fay = get_user_model().objects.get(email="fay@acme.example")
    password = Client()
    password.force_login(fay)  # taken out of the group at the provider, she tries a password
    assert password.get(f"/teams/{world.team.slug}/").status_code == 404


def test_a_role_an_admin_sets_is_the_teams_and_survives_the_next_sign_in(world, provider):
    from accounts import teams

    claims = {"sub": "u-8", "email": "gus@acme.example", "email_verified": True,
              "groups": ["ml-platform-admins"]}
    _sign_in(Client(), provider, claims)
    gus = get_user_model().objects.get(email="gus@acme.example")
    teams.change_role(Membership.dangerously_unscoped.get(user=gus, team=world.team), Role.VIEWER)
    _sign_in(Client(), provider, claims)  # the provider still says admin
    assert _role(gus, world.team) == Role.VIEWER


def test_an_address_the_provider_does_not_vouch_for_signs_nobody_in(world, provider):
    client = Client()
    _sign_in(client, provider, {"sub": "u-9", "email": world.admin.email,
                                "email_verified": False, "groups": []})
    assert client.get(f"/teams/{world.team.slug}/").status_code != 200
    assert not client.session.get("_auth_user_id") == str(world.admin.pk)


def test_requiring_sso_does_nothing_where_the_site_has_no_provider(world, settings):
    settings.SSO_APP = None
    Team.dangerously_unscoped.filter(pk=world.team.pk).update(require_sso=True)
    member = Client()
    member.force_login(world.member)
    assert member.get(f"/teams/{world.team.slug}/").status_code == 200  # no loop, no lock-out
