"""The audit log, end to end: changes made through the real pages and the real API are
recorded once each, with who, when, from where and what, secrets masked; refused changes
record nothing; owners and admins read and export it, nobody else does; old rows go."""

from __future__ import annotations

import csv
import io
import json
from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from accounts import teams
from accounts.models import ApiToken, Membership
from audit import retention
from audit.models import AuditEntry
from scans.models import Endpoint, NotificationChannel
from tests.conftest import bearer, build_world
from tests.helpers.factories import make_endpoint

pytestmark = pytest.mark.django_db

API_KEY = "sk-audit-secret-4242"
CHANNEL_SECRET = "hush-audit-777"
FORWARDED = {"REMOTE_ADDR": "203.0.113.9"}


def _entries(team, **lookup):
    return list(AuditEntry.objects.for_team(team).filter(**lookup).order_by("at", "id"))


def _owner(world) -> Client:
    client = Client()
    client.force_login(world.owner)
    return client


def _page_form(name: str, **extra) -> dict:
    return {"name": name, "base_url": "http://127.0.0.1:9/v1", "model": "m", "mode": "scheduled",
            "levels_text": "1, 2", "max_tokens": 16, "timeout_s": 10, "interval_minutes": 60,
            "enabled": "on", "slo_grade_floor": "B", "slo_objective": 0.9,
            "alert_after_errors": 3, **extra}


def _no_secret_anywhere(team, *secrets: str) -> None:
    text = json.dumps([[e.actor, e.object_name, e.changes] for e in _entries(team)])
    for secret in secrets:
        assert secret not in text


def test_endpoint_made_changed_and_deleted_through_the_pages_is_recorded_once_each(world):
    client = _owner(world)
    made = client.post(reverse("endpoint-create", kwargs={"slug": world.team.slug}),
                       _page_form("audited", api_key=API_KEY), **FORWARDED)
    assert made.status_code == 302, made.content.decode()[:500]
    endpoint = Endpoint.objects.for_team(world.team).get(name="audited")
    (created,) = _entries(world.team, object_type="endpoint")
    assert (created.action, created.actor, created.actor_user_id, created.address) == (
        "create", world.owner.email, world.owner.pk, "203.0.113.9")
    assert created.object_id == str(endpoint.public_id) and created.object_name == "audited"
    assert created.changes["api_key_encrypted"] == {"before": None, "after": "•••"}
    assert created.changes["base_url"]["after"] == "http://127.0.0.1:9/v1"

    edited = client.post(reverse("endpoint-edit", kwargs={"public_id": endpoint.public_id}),
                         _page_form("audited again", api_key="sk-another-9999"), **FORWARDED)
    assert edited.status_code == 302
    changed = _entries(world.team, object_type="endpoint", action="change")
    assert len(changed) == 1
    assert changed[0].changes["name"] == {"before": "audited", "after": "audited again"}
    assert changed[0].changes["api_key_encrypted"] == {"before": "•••", "after": "changed"}
    assert "next_scan_at" not in changed[0].changes  # the schedule follows, it is no change

    deleted = client.post(reverse("endpoint-delete", kwargs={"public_id": endpoint.public_id}))
    assert deleted.status_code == 302
    (gone,) = _entries(world.team, object_type="endpoint", action="delete")
    assert gone.object_name == "audited again" and gone.changes["name"]["before"] == "audited again"
    _no_secret_anywhere(world.team, API_KEY, "sk-another-9999")


def test_endpoint_made_changed_and_deleted_through_the_api_names_the_token(world, api):
    token = ApiToken.objects.for_team(world.team).get(scope="read-write")
    made = api.post(reverse("api-endpoint-list"),
                    {"name": "by api", "base_url": "http://127.0.0.1:8080/v1", "model": "tiny",
                     "levels": [1, 4], "api_key": API_KEY},
                    format="json", **bearer(world.read_write_token), **FORWARDED)
    assert made.status_code == 201, made.json()
    public_id = made.json()["id"]
    patched = api.patch(reverse("api-endpoint-detail", kwargs={"public_id": public_id}),
                        {"max_tokens": 64}, format="json", **bearer(world.read_write_token))
    assert patched.status_code == 200, patched.json()
    removed = api.delete(reverse("api-endpoint-detail", kwargs={"public_id": public_id}),
                         **bearer(world.read_write_token))
    assert removed.status_code == 204

    entries = _entries(world.team, object_type="endpoint")
    assert [e.action for e in entries] == ["create", "change", "delete"]
    assert {e.actor for e in entries} == {f"token {token.name} ({token.prefix}…)"}
    assert {e.actor_token_id for e in entries} == {token.pk} and entries[0].address == "203.0.113.9"
    assert entries[1].changes == {"max_tokens": {"before": 128, "after": 64}}
    assert entries[0].changes["api_key_encrypted"]["after"] == "•••"
    _no_secret_anywhere(world.team, API_KEY, world.read_write_token)


def test_a_refused_change_records_nothing(world, api):
    endpoint = make_endpoint(world.team)
    before = len(_entries(world.team))
    refused = api.patch(reverse("api-endpoint-detail", kwargs={"public_id": endpoint.public_id}),
                        {"levels": []}, format="json", **bearer(world.read_write_token))
    assert refused.status_code in (400, 422)
    page = _owner(world).post(reverse("endpoint-edit", kwargs={"public_id": endpoint.public_id}),
                              _page_form("x", levels_text="not levels"))
    assert page.status_code == 400
    assert len(_entries(world.team)) == before


def test_a_channels_url_and_secret_never_reach_the_log_or_the_export(world, api, settings):
    settings.OUTBOUND_ALLOW = ["loopback"]
    url = "http://127.0.0.1:9/hook/path-token-abc"
    made = api.post(reverse("api-channel-list"),
                    {"kind": "webhook", "name": "hook", "url": url, "secret": CHANNEL_SECRET},
                    format="json", **bearer(world.read_write_token))
    assert made.status_code == 201, made.json()
    channel = NotificationChannel.objects.for_team(world.team).get(name="hook")
    client = _owner(world)
    edited = client.post(reverse("channel-edit", kwargs={"public_id": channel.public_id}),
                         {"kind": "webhook", "name": "hook 2", "enabled": "on", "url": url + "x",
                          "secret": "another-secret-555"})
    assert edited.status_code == 302, edited.content.decode()[:400]
    entries = _entries(world.team, object_type="channel")
    assert [e.action for e in entries] == ["create", "change"]
    assert entries[1].changes["config_encrypted"] == {"before": "•••", "after": "changed"}
    exported = "".join(
        client.get(reverse("api-team-audit", kwargs={"slug": world.team.slug}),
                   {"format": kind}).content.decode() for kind in ("jsonl", "csv"))
    for secret in (CHANNEL_SECRET, "another-secret-555", "path-token-abc"):
        assert secret not in exported
    _no_secret_anywhere(world.team, CHANNEL_SECRET, "another-secret-555", "path-token-abc")


def test_members_roles_and_tokens_are_recorded(world):
    client = _owner(world)
    target = Membership.objects.for_team(world.team).get(user=world.target)
    client.post(reverse("member-role", kwargs={"slug": world.team.slug, "public_id": target.public_id}),
                {"role": "viewer"})
    (role,) = _entries(world.team, object_type="member", action="change")
    assert role.changes == {"role": {"before": "member", "after": "viewer"}}
    assert role.object_name == str(world.target)

    made = client.post(reverse("token-create", kwargs={"slug": world.team.slug}),
                       {"scope": "read-only", "name": "ci"})
    assert made.status_code == 200
    token = ApiToken.objects.for_team(world.team).get(name="ci")
    client.post(reverse("token-revoke", kwargs={"slug": world.team.slug, "public_id": token.public_id}))
    entries = _entries(world.team, object_type="API token", object_id=str(token.public_id))
    assert [e.action for e in entries] == ["create", "change"]
    assert entries[0].object_name == f"ci ({token.prefix}…)" and entries[0].actor == world.owner.email
    assert entries[0].changes["secret_hmac"]["after"] == "•••"
    assert token.secret_hmac not in json.dumps(entries[0].changes)
    assert list(entries[1].changes) == ["revoked_at"]

    client.post(reverse("member-remove", kwargs={"slug": world.team.slug, "public_id": target.public_id}))
    (removed,) = _entries(world.team, object_type="member", action="delete")
    assert removed.changes["role"]["before"] == "viewer"

    client.post(reverse("team-settings", kwargs={"slug": world.team.slug}),
                {"badge_site_measured_only": "on"})
    (settings_change,) = _entries(world.team, object_type="team", action="change")
    assert settings_change.changes == {"badge_site_measured_only": {"before": False, "after": True}}


def test_owners_and_admins_read_and_export_it_and_no_one_else(world):
    teams.rename_team(world.team, "Acme Renamed")  # one row, made by the system
    url = reverse("api-team-audit", kwargs={"slug": world.team.slug})
    for role in ("owner", "admin"):
        client = Client()
        client.force_login(world.user(role))
        page = client.get(reverse("team-audit", kwargs={"slug": world.team.slug}))
        assert page.status_code == 200
        html = page.content.decode()
        assert "Acme Renamed" in html and "data-audit-entry" in html and "system" in html
        listed = client.get(url)
        assert listed.status_code == 200
        assert any(row["object_name"] == "Acme Renamed" for row in listed.json()["results"])
        lines = client.get(url, {"format": "jsonl"})
        assert lines["Content-Type"].startswith("application/jsonl")
        rows = [json.loads(line) for line in lines.content.decode().splitlines()]
        assert rows and {row["team"] for row in rows} == {world.team.slug}
        assert rows == sorted(rows, key=lambda row: row["at"], reverse=True)  # newest first
        table = client.get(url, {"format": "csv"})
        assert table["Content-Type"].startswith("text/csv")
        read = list(csv.reader(io.StringIO(table.content.decode())))
        assert read[0] == ["id", "at", "team", "actor_kind", "actor", "address", "action",
                           "object_type", "object_id", "object_name", "changes"]
        assert len(read) == len(rows) + 1
    settings_page = _owner(world).get(reverse("team-settings", kwargs={"slug": world.team.slug}))
    assert reverse("team-audit", kwargs={"slug": world.team.slug}) in settings_page.content.decode()
    for role in ("member", "viewer"):
        client = Client()
        client.force_login(world.user(role))
        settings_page = client.get(reverse("team-settings", kwargs={"slug": world.team.slug}))
        assert reverse("team-audit", kwargs={"slug": world.team.slug}) not in settings_page.content.decode()
        assert client.get(reverse("team-audit", kwargs={"slug": world.team.slug})).status_code == 403
        assert client.get(url, {"format": "csv"}).status_code == 403
    outsider = Client()
    outsider.force_login(world.outsider)
    assert outsider.get(reverse("team-audit", kwargs={"slug": world.team.slug})).status_code == 404
    assert outsider.get(url).status_code == 404
    own = outsider.get(reverse("api-team-audit", kwargs={"slug": world.other_team.slug}),
                       {"format": "jsonl"})
    assert own.status_code == 200 and world.team.slug not in own.content.decode()
    assert "Acme Renamed" not in own.content.decode()


def test_the_export_filters_by_time_type_and_actor(world):
    client = _owner(world)
    teams.rename_team(world.team, "Old name")
    AuditEntry.objects.for_team(world.team).update(at=timezone.now() - timedelta(days=3))
    client.post(reverse("team-rename", kwargs={"slug": world.team.slug}), {"name": "New name"})
    url = reverse("api-team-audit", kwargs={"slug": world.team.slug})
    since = (timezone.now() - timedelta(days=1)).isoformat()
    recent = client.get(url, {"format": "jsonl", "since": since, "object_type": "team"})
    (row,) = [json.loads(line) for line in recent.content.decode().splitlines()]
    assert row["object_name"] == "New name" and row["actor"] == world.owner.email
    by_system = client.get(url, {"format": "jsonl", "actor": "system", "object_type": "team"})
    names = [json.loads(line)["object_name"] for line in by_system.content.decode().splitlines()]
    assert names == ["Old name"]
    assert client.get(url, {"since": "yesterday"}).status_code == 400
    page = client.get(reverse("team-audit", kwargs={"slug": world.team.slug}),
                      {"actor": world.owner.email})
    html = page.content.decode()
    assert "New name" in html and "<td>system</td>" not in html


def test_retention_deletes_rows_older_than_the_setting(world, settings):
    settings.AUDIT_RETENTION_DAYS = 30
    teams.rename_team(world.team, "Kept")
    old = build_world()
    teams.rename_team(old.team, "Too old")
    AuditEntry.objects.for_team(old.team).update(at=timezone.now() - timedelta(days=31))
    assert retention.prune() >= 1
    assert not _entries(old.team)
    assert any(e.object_name == "Kept" for e in _entries(world.team))
