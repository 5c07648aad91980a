"""Team API tokens: shown once, stored as prefix + HMAC, scoped, revocable, last use recorded."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.management import call_command
from django.urls import reverse
from django.utils import timezone

from accounts.models import ApiToken
from tests.conftest import bearer

pytestmark = pytest.mark.django_db


def _whoami(api, token):
    return api.get(reverse("api-whoami"), **bearer(token))


def test_token_authenticates_as_its_team_with_its_scope(world, api):
    response = _whoami(api, world.read_only_token)
    assert response.status_code == 200
    body = response.json()
    assert body["kind"] == "token"
    assert body["token_scope"] == "read-only"
    assert body["teams"] == [{"slug": world.team.slug, "role": "viewer"}]


def test_only_a_prefix_and_an_hmac_are_stored(world):
    token = world.read_write_token
    assert token.startswith("tkv_")
    row = ApiToken.dangerously_unscoped.get(prefix=token[:12])
    stored = " ".join(str(getattr(row, f.attname)) for f in ApiToken._meta.fields)
    assert token not in stored
    assert token[12:] not in stored


def test_last_use_is_recorded(world, api):
    row = ApiToken.dangerously_unscoped.get(prefix=world.read_only_token[:12])
    assert row.last_used_at is None
    _whoami(api, world.read_only_token)
    row.refresh_from_db()
    assert row.last_used_at is not None


@pytest.mark.parametrize(
    "header",
    ["Bearer tkv_", "Bearer tkv_short", "Bearer tkv_" + "x" * 300, "Bearer tkh_" + "a" * 40,
     "Bearer " + "tkv_" + "A" * 43],
)
def test_malformed_or_unknown_token_gets_401_with_json_error(api, header):
    response = api.get(reverse("api-whoami"), HTTP_AUTHORIZATION=header)
    assert response.status_code == 401
    assert response["Content-Type"].startswith("application/json")
    assert response.json()["detail"]
    assert response["WWW-Authenticate"] == "Bearer"


def test_a_token_with_one_wrong_character_is_refused(world, api):
    token = world.read_only_token
    wrong = token[:-1] + ("A" if token[-1] != "A" else "B")
    assert _whoami(api, wrong).status_code == 401


def test_revoked_token_gets_401(world, api):
    from accounts import teams

    row = ApiToken.dangerously_unscoped.get(prefix=world.read_only_token[:12])
    teams.revoke_token(row)
    response = _whoami(api, world.read_only_token)
    assert response.status_code == 401
    assert "revoked or expired" in response.json()["detail"]


def test_expired_token_gets_401(world, api):
    ApiToken.dangerously_unscoped.filter(prefix=world.read_only_token[:12]).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert _whoami(api, world.read_only_token).status_code == 401


def test_createtoken_prints_the_token_once_on_one_line(world, api, capsys):
    call_command("createtoken", "--team", world.team.slug, "--scope", "read-write")
    out = capsys.readouterr().out
    assert out.count("\n") == 1
    token = out.strip()
    assert token.startswith("tkv_")
    assert _whoami(api, token).json()["token_scope"] == "read-write"


def test_createtoken_for_unknown_team_fails_clearly(db):
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="No team with slug 'nope'"):
        call_command("createtoken", "--team", "nope", "--scope", "read-only")


def test_token_page_shows_the_secret_once(world, client):
    client.force_login(world.owner)
    created = client.post(
        reverse("token-create", kwargs={"slug": world.team.slug}),
        {"scope": "read-only", "name": "ci"},
    )
    secret = created.context["secret"]
    assert secret in created.content.decode()
    listing = client.get(reverse("team-tokens", kwargs={"slug": world.team.slug}))
    assert secret not in listing.content.decode()
    assert secret[:12] in listing.content.decode()


def test_unknown_scope_is_refused_on_the_page(world, client):
    client.force_login(world.owner)
    before = ApiToken.dangerously_unscoped.count()
    client.post(reverse("token-create", kwargs={"slug": world.team.slug}), {"scope": "admin"})
    assert ApiToken.dangerously_unscoped.count() == before
