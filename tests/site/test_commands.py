from __future__ import annotations

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from accounts.models import Membership, Role, Team
from common.paths import VAR_DIR
from tests.helpers.servers import healthz, serve

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


def test_the_demo_endpoint_follows_the_port_the_run_command_gives_its_target(monkeypatch):
    from scans.models import Endpoint

    monkeypatch.setenv("DEMO_TARGET_PORT", "8190")
    call_command("seed_demo")
    demo = Endpoint.dangerously_unscoped.get(team__slug="demo", name="Demo target")
    assert demo.base_url == "http://127.0.0.1:8190/v1"
    monkeypatch.setenv("DEMO_TARGET_PORT", "8290")  # `make run PORT=8200` the next time
    call_command("seed_demo")
    demo.refresh_from_db()
    assert demo.base_url == "http://127.0.0.1:8290/v1"


def test_the_demo_endpoint_asks_for_the_model_its_target_lists():
    """A fresh `make run` showed the demo degraded: it asked for a model the demo target does
    not list at /models. A demo made before the fix is corrected by the next run."""
    import json
    import urllib.request

    from scans.grader.demo_server import TargetConfig, running_target
    from scans.models import Endpoint

    call_command("seed_demo")
    demos = Endpoint.dangerously_unscoped.filter(team__slug="demo", name="Demo target")
    demos.update(model="demo-model")  # as seeded before
    call_command("seed_demo")
    with running_target(TargetConfig()) as (host, port):
        with urllib.request.urlopen(f"http://{host}:{port}/v1/models", timeout=10) as answer:
            listed = [m["id"] for m in json.load(answer)["data"]]
    assert demos.get().model in listed


def test_the_ready_banner_with_the_login_is_printed_once_the_site_answers_at_site_url(settings, capsys):
    with serve(healthz) as port:
        call_command("seed_demo")
        capsys.readouterr()
        settings.SITE_URL = f"http://127.0.0.1:{port}"
        call_command("seed_demo", "--login-when-up")
        out = capsys.readouterr().out
    site = f"http://127.0.0.1:{port}"
    lines = out.splitlines()
    assert lines[0] == lines[-1] == "=" * 58  # a banner that stands out at the end
    assert f"Tokvera is ready: {site}/" in lines
    assert f"  Log in at  {site}/login/" in lines and "  user       demo" in lines
    password = (VAR_DIR / "demo_password").read_text().strip()
    assert f"  password   {password}" in lines
    assert any("kept in" in line and "demo_password" in line for line in lines)
    assert max(len(line) for line in lines) <= 58  # fits 80 columns under honcho's prefix


def test_the_login_line_says_so_when_the_site_never_answers(settings, monkeypatch):
    from scans.management.commands import seed_demo

    call_command("seed_demo")
    settings.SITE_URL = "http://127.0.0.1:9"  # discard: nothing answers
    monkeypatch.setattr(seed_demo, "WAIT_FOR_SITE_S", 0)
    with pytest.raises(CommandError, match=r"did not answer at http://127.0.0.1:9/healthz"):
        call_command("seed_demo", "--login-when-up")
