"""`tokvera export`: a team's configuration as the file `tokvera apply` reads, secrets only as
the environment variables to set; exported and applied unedited, it changes nothing."""

from __future__ import annotations

import datetime
from decimal import Decimal

import pytest
from django.utils import timezone

from accounts import encryption
from scans.config_as_code import document
from scans.models import MaintenanceWindow
from scans.status_pages.settings import page_of, save_settings
from tests.helpers.factories import make_channel, make_endpoint

pytestmark = pytest.mark.django_db(transaction=True)

HOOK = ("http://127.0.0.1:9/hook-token-in-path", "hook-signing-secret")
KEY = "sk-exported-never"


def _team_made_on_the_site(team):
    """A team set up through the pages' services, with what a file can say of each kind."""
    hook = make_channel(team, "webhook", name="ops hook", url=HOOK[0], secret=HOOK[1])
    chat = make_endpoint(team, name="chat", price_input_per_mtok=Decimal("0.1"),
                         slo_error_rate=0.02, capacity_search=True, capacity_alert_below=2,
                         api_key_encrypted=encryption.encrypt(KEY), accepts_pushes=True)
    chat.all_channels = False
    chat.save(update_fields=["all_channels"])
    chat.channels.set([hook])
    make_endpoint(team, name="batch", enabled=False, interval_minutes=120)
    now = timezone.now().replace(microsecond=0)
    MaintenanceWindow.dangerously_unscoped.create(
        team=team, endpoint=chat, name="upgrade", kind="once",
        starts_at=now + datetime.timedelta(hours=2), ends_at=now + datetime.timedelta(hours=3))
    MaintenanceWindow.dangerously_unscoped.create(
        team=team, name="weekly", kind="weekly", weekdays=[6], start_time=datetime.time(3, 30),
        duration_minutes=45, timezone="America/New_York", pause_scans=True)
    save_settings(page_of(team), enabled=True, slug=f"{team.slug}-up", title="Up?",
                  shown=[(chat, "Chat API"), (make_endpoint(team, name="embed"), "")])


def test_export_then_apply_unedited_changes_nothing_and_no_secret_is_written(
        world, cli, monkeypatch):
    _team_made_on_the_site(world.team)
    path = cli.tmp / "exported.yaml"

    code, out, err = cli.export("-o", str(path))

    assert code == 0, err
    text = path.read_text()
    assert not any(secret in text + out + err for secret in (*HOOK, KEY))
    config = document.load(text)
    assert config["team"] == world.team.slug
    assert config["channels"]["ops hook"] == {
        "kind": "webhook", "url": {"secret_env": "TOKVERA_CHANNEL_OPS_HOOK"},
        "secret": {"secret_env": "TOKVERA_CHANNEL_OPS_HOOK_SECRET"}}
    assert config["endpoints"]["chat"]["api_key"] == {
        "secret_env": "TOKVERA_ENDPOINT_CHAT_API_KEY"}
    assert config["endpoints"]["chat"]["channels"] == ["ops hook"]
    assert config["status_page"]["endpoints"] == [{"endpoint": "chat", "name": "Chat API"},
                                                  "embed"]
    # The header names every variable to set.
    for name in ("TOKVERA_CHANNEL_OPS_HOOK", "TOKVERA_CHANNEL_OPS_HOOK_SECRET",
                 "TOKVERA_ENDPOINT_CHAT_API_KEY"):
        assert f"#   {name}\n" in text
    monkeypatch.setenv("TOKVERA_CHANNEL_OPS_HOOK", HOOK[0])
    monkeypatch.setenv("TOKVERA_CHANNEL_OPS_HOOK_SECRET", HOOK[1])
    monkeypatch.setenv("TOKVERA_ENDPOINT_CHAT_API_KEY", KEY)

    code, out, err = cli.apply(path, "--prune")

    assert code == 0, err
    assert "No changes: the site matches the file." in out


def test_export_to_standard_output_reads_back_as_the_same_file(world, cli):
    _team_made_on_the_site(world.team)

    code, out, err = cli.export()

    assert code == 0, err
    exported = document.load(out)
    assert exported["endpoints"]["batch"]["enabled"] is False
    assert exported["maintenance_windows"]["weekly"]["start_time"] == "03:30:00"
    assert document.shape_problems(exported) == []


def test_secrets_of_names_alike_get_their_own_variables(world):
    from scans.api.config import export_config

    make_endpoint(world.team, name="Chat A", api_key_encrypted=encryption.encrypt("key-one"))
    make_endpoint(world.team, name="chat-a", api_key_encrypted=encryption.encrypt("key-two"))
    make_channel(world.team, "ntfy", name="ops", url="https://ntfy.sh/ops-topic")
    config, _ = export_config(world.team)
    names = [item["api_key"]["secret_env"] for item in config["endpoints"].values()
             if "api_key" in item]
    assert sorted(names) == ["TOKVERA_ENDPOINT_CHAT_A_API_KEY", "TOKVERA_ENDPOINT_CHAT_A_API_KEY_2"]
