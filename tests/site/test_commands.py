from __future__ import annotations

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from accounts.models import Membership, Role, Team

pytestmark = pytest.mark.django_db


def test_createteam_makes_the_email_owner(capsys):
    call_command("createteam", "acme", "--owner", "Ana@Example.com", "--name", "Acme Inc")
    team = Team.dangerously_unscoped.get(slug="acme")
    membership = Membership.dangerously_unscoped.get(team=team)
    assert membership.role == Role.OWNER
    assert membership.user.email == "ana@example.com"
    assert "created team acme" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("args", "message"),
    [(["Bad Slug!", "--owner", "a@b.test"], "slug"), (["ok", "--owner", "not-an-email"], "email")],
)
def test_createteam_refuses_bad_input(args, message):
    with pytest.raises(CommandError, match=f"(?i){message}"):
        call_command("createteam", *args)
    assert not Team.dangerously_unscoped.exists()


def test_createteam_refuses_a_taken_slug():
    call_command("createteam", "acme", "--owner", "a@b.test")
    with pytest.raises(CommandError, match="already exists"):
        call_command("createteam", "acme", "--owner", "c@d.test")


def test_seed_demo_is_idempotent_and_prints_a_working_login(client, capsys):
    call_command("seed_demo")
    first = capsys.readouterr().out
    call_command("seed_demo")
    second = capsys.readouterr().out
    assert first == second
    password = first.split("password: ")[1].strip()
    assert client.login(username="demo", password=password)
    assert Team.dangerously_unscoped.filter(slug="demo").count() == 1
