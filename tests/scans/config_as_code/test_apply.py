"""`tokvera apply FILE.yaml`: the plan it prints, idempotence, --dry-run and --prune, and that
a refused file changes nothing, against a live site through the real CLI."""

from __future__ import annotations

import datetime

import pytest

from accounts import encryption
from audit.models import AuditEntry
from scans.models import Endpoint, MaintenanceWindow, NotificationChannel, StatusPage
from scans.notify.channels import service as channel_service
from tests.scans.config_as_code.conftest import FILE, SECRETS

pytestmark = pytest.mark.django_db(transaction=True)


def _rows(team) -> dict:
    """What the team has that a file manages, by name (the state a refused apply keeps)."""
    page = StatusPage.dangerously_unscoped.filter(team=team).first()
    return {
        "endpoints": sorted(Endpoint.dangerously_unscoped.filter(team=team)
                            .values_list("name", "timeout_s")),
        "channels": sorted(NotificationChannel.dangerously_unscoped.filter(team=team)
                           .values_list("name", "kind", "enabled")),
        "windows": sorted(MaintenanceWindow.dangerously_unscoped.filter(team=team)
                          .values_list("name", "duration_minutes")),
        "page": page and (page.enabled, page.slug, page.title),
    }


def test_a_file_creates_everything_from_empty_and_applied_again_changes_nothing(world, cli):
    path = cli.write(FILE.format(team=world.team.slug))

    code, out, err = cli.apply(path)

    assert code == 0, err
    for line in ('+ channel "ops hook"', '+ endpoint "chat"', '+ maintenance window "nightly"',
                 '~ status page'):
        assert line in out
    assert "api_key: (secret)" in out and "Plan: 3 to create, 1 to change, 0 to delete." in out
    assert 'channel "Email to owners and admins"' in out  # the team's own, left as it is
    endpoint = Endpoint.dangerously_unscoped.get(team=world.team, name="chat")
    assert (endpoint.levels, endpoint.timeout_s, endpoint.interval_minutes) == ([1, 2], 30, 30)
    assert float(endpoint.price_input_per_mtok) == 0.5 and endpoint.slo_ttft_p95_ms == 800
    assert encryption.decrypt(endpoint.api_key_encrypted) == SECRETS["CHAT_KEY"]
    assert [c.name for c in endpoint.channels.all()] == ["ops hook"] and not endpoint.all_channels
    hook = NotificationChannel.dangerously_unscoped.get(team=world.team, name="ops hook")
    assert channel_service.stored_config(hook) == {"url": SECRETS["HOOK_URL"],
                                                   "secret": SECRETS["HOOK_SECRET"]}
    window = MaintenanceWindow.dangerously_unscoped.get(team=world.team, name="nightly")
    assert (window.endpoint, window.weekdays, window.start_time) == (
        endpoint, [0, 3], datetime.time(2, 0))
    page = StatusPage.dangerously_unscoped.get(team=world.team)
    assert (page.enabled, page.slug, page.title) == (True, f"{world.team.slug}-status",
                                                    "Acme status")
    assert [e.endpoint for e in page.entries.all()] == [endpoint]
    # Written as the API writes: each change in the audit log, by the token.
    logged = set(AuditEntry.objects.for_team(world.team).filter(actor_kind="token")
                 .values_list("object_type", "action"))
    assert {("endpoint", "create"), ("channel", "create"), ("maintenance window", "create"),
            ("status page", "change")} <= logged
    assert not any(secret in out + err for secret in SECRETS.values())

    again, out, err = cli.apply(path)

    assert again == 0, err
    assert "No changes: the site matches the file." in out
    assert "Plan: 0 to create, 0 to change, 0 to delete." in out


def test_a_dry_run_prints_the_plan_and_changes_nothing(world, cli):
    path = cli.write(FILE.format(team=world.team.slug))
    before = _rows(world.team)

    code, out, err = cli.apply(path, "--dry-run")

    assert code == 0, err
    assert '+ endpoint "chat"' in out and "Dry run: nothing was changed." in out
    assert "      base_url: \"http://127.0.0.1:9/v1\"" in out
    assert _rows(world.team) == before
    assert not AuditEntry.objects.for_team(world.team).filter(object_type="endpoint").exists()


def test_a_changed_field_is_shown_as_old_and_new_and_a_secret_only_as_changed(
        world, cli, monkeypatch):
    text = FILE.format(team=world.team.slug)
    assert cli.apply(cli.write(text))[0] == 0
    monkeypatch.setenv("CHAT_KEY", "sk-another-key-never-shown")
    edited = cli.write(text.replace("timeout_s: 30", "timeout_s: 45")
                       .replace("levels: [1, 2]", "levels: [1, 2, 4]"))

    code, out, err = cli.apply(edited, "--dry-run")

    assert code == 0, err
    assert '~ endpoint "chat"' in out
    assert "      timeout_s: 30.0 → 45.0" in out and "      levels: [1, 2] → [1, 2, 4]" in out
    assert "      api_key: (secret changed)" in out
    assert "sk-another-key" not in out and "Plan: 0 to create, 1 to change, 0 to delete." in out
    assert Endpoint.dangerously_unscoped.get(team=world.team, name="chat").timeout_s == 30

    code, out, err = cli.apply(edited)

    assert code == 0 and "Applied." in out, err
    endpoint = Endpoint.dangerously_unscoped.get(team=world.team, name="chat")
    assert (endpoint.timeout_s, endpoint.levels) == (45, [1, 2, 4])
    assert encryption.decrypt(endpoint.api_key_encrypted) == "sk-another-key-never-shown"
    assert all(len(line) <= 80 for line in out.splitlines())


def test_a_removed_item_is_left_without_prune_and_deleted_with_it(world, cli):
    text = FILE.format(team=world.team.slug)
    assert cli.apply(cli.write(text))[0] == 0
    without = text.replace("maintenance_windows:\n  nightly:", "maintenance_windows: {}\n  _x:")
    without = without.split("  _x:")[0] + "status_page:" + without.split("status_page:")[1]

    code, out, err = cli.apply(cli.write(without))

    assert code == 0, err
    assert "No changes" in out and 'maintenance window "nightly"' in out
    assert "left as they are (--prune deletes them)" in out
    assert MaintenanceWindow.dangerously_unscoped.filter(team=world.team).exists()

    code, out, err = cli.apply(cli.write(without), "--prune")

    assert code == 0, err
    assert '- maintenance window "nightly"' in out
    assert not MaintenanceWindow.dangerously_unscoped.filter(team=world.team).exists()
    # --prune touches the sections the file has only, and deletes what they leave out.
    assert not NotificationChannel.dangerously_unscoped.filter(
        team=world.team, name="Email to owners and admins").exists()
    assert Endpoint.dangerously_unscoped.filter(team=world.team, name="chat").exists()
    assert AuditEntry.objects.for_team(world.team).filter(
        object_type="maintenance window", action="delete").exists()


def test_a_refused_item_changes_nothing_and_every_refusal_names_its_item_and_field(world, cli):
    good = FILE.format(team=world.team.slug)
    bad = good.replace("endpoints:\n", "endpoints:\n  broken:\n    base_url: llm.example.com/v1\n"
                                       "    model: tiny\n    colour: blue\n") \
              .replace("channels:\n  ops hook:", "channels:\n  smoke:\n    kind: smoke-signal\n"
                                                 "  ops hook:")
    before = _rows(world.team)

    code, out, err = cli.apply(cli.write(bad))

    assert code == 1 and out == ""
    assert "the site refused" in err and "nothing was changed" in err
    assert "endpoints.broken.colour: unknown field" in err
    assert "channels.smoke.kind:" in err and "not a valid choice" in err
    assert "did you mean http://llm.example.com/v1" in " ".join(err.split())
    assert _rows(world.team) == before  # the good items were not applied either
    assert not AuditEntry.objects.for_team(world.team).filter(actor_kind="token").exists()
    assert all(len(line) <= 80 for line in err.splitlines())


def test_an_unset_secret_variable_is_named_and_nothing_is_sent(world, cli, monkeypatch):
    monkeypatch.delenv("CHAT_KEY")
    before = _rows(world.team)

    code, out, err = cli.apply(cli.write(FILE.format(team=world.team.slug)))

    assert code == 2
    assert "endpoints.chat.api_key: the environment variable CHAT_KEY is not set" in err
    assert _rows(world.team) == before


def test_broken_yaml_and_a_key_given_twice_are_named_with_their_line(world, cli):
    code, _, err = cli.apply(cli.write(f"team: {world.team.slug}\nendpoints:\n  chat: [\n"))
    assert code == 2 and "line 4" in err

    twice = f"team: {world.team.slug}\nendpoints:\n  chat: {{}}\n  chat: {{}}\n"
    code, _, err = cli.apply(cli.write(twice))
    assert code == 2 and "'chat' is given twice" in err and "line 4" in err


def test_another_teams_token_can_neither_read_nor_write_and_a_viewer_cannot_apply(
        world, cli, monkeypatch):
    path = cli.write(FILE.format(team=world.team.slug))
    before = _rows(world.team)
    monkeypatch.setenv("TOKVERA_TOKEN", world.other_team_token)

    code, _, err = cli.apply(path)
    assert code == 1 and f"no team '{world.team.slug}'" in err
    code, out, err = cli.export("--team", world.team.slug)
    assert code == 1 and out == "" and "no team" in err

    monkeypatch.setenv("TOKVERA_TOKEN", world.read_only_token)
    code, _, err = cli.apply(path, "--dry-run")
    assert code == 1 and "403" in err and "read-only" in err
    assert _rows(world.team) == before
    assert _rows(world.other_team)["endpoints"] == []
