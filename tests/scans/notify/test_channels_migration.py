"""Migrations 0016/0017: a database whose endpoints had their own alert settings
(email on or off, a webhook URL with or without a secret) migrates into notification channels
and loses no alert: each endpoint then alerts exactly where it did. Run in another process on a
scratch database, as tests/accounts/test_move_migrations.py does."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.conftest import scratch_database
from tests.helpers.paths import ROOT

SCRIPT = r"""
import json
import django
django.setup()
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from accounts import encryption

BEFORE = [("scans", "0015_scan_status_cancelled")]
executor = MigrationExecutor(connection)
executor.migrate(BEFORE)
apps = executor.loader.project_state(BEFORE).apps
Team = apps.get_model("accounts", "Team")
Endpoint = apps.get_model("scans", "Endpoint")
team = Team._default_manager.create(name="Acme", slug="acme")
other = Team._default_manager.create(name="Globex", slug="globex")
secret = encryption.encrypt("s3cret")
def endpoint(team, name, **alerts):
    Endpoint._default_manager.create(team=team, name=name, base_url="https://llm.example.test/v1",
                                     model="m", levels=[1], badge_key=f"key-{name}", **alerts)
endpoint(team, "mail only", alert_email=True)
endpoint(team, "mail and hook", alert_email=True, webhook_url="https://hooks.example.test/a",
         webhook_secret_encrypted=secret)
endpoint(team, "same hook", alert_email=False, webhook_url="https://hooks.example.test/a",
         webhook_secret_encrypted=secret)
endpoint(team, "silent", alert_email=False)
endpoint(other, "theirs", alert_email=True)

executor = MigrationExecutor(connection)
executor.migrate([("scans", "0017_endpoint_alerts_moved_to_channels")])
apps = executor.loader.project_state([("scans", "0017_endpoint_alerts_moved_to_channels")]).apps
Channel = apps.get_model("scans", "NotificationChannel")
Endpoint = apps.get_model("scans", "Endpoint")
out = {"channels": {}, "endpoints": {}}
for c in Channel._default_manager.order_by("pk"):
    out["channels"][f"{c.team.slug}:{c.name}"] = {
        "kind": c.kind, "enabled": c.enabled, "destination": c.destination,
        "config": json.loads(encryption.decrypt(c.config_encrypted) or "{}")}
for e in Endpoint._default_manager.order_by("pk"):
    used = (Channel._default_manager.filter(team=e.team) if e.all_channels else e.channels.all())
    out["endpoints"][e.name] = {"all": e.all_channels,
                                "to": sorted(f"{c.team.slug}:{c.name}" for c in used)}
print(json.dumps(out))
"""


def test_endpoints_alert_settings_become_channels_and_each_endpoint_alerts_where_it_did():
    env = {
        **os.environ,
        "DATABASE_URL": scratch_database("channels"),
        "DJANGO_SETTINGS_MODULE": "tokvera_site.settings",
    }
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    mail, hook = "acme:Email to owners and admins", "acme:Webhook to hooks.example.test"
    assert result["channels"] == {
        mail: {"kind": "email", "enabled": True, "destination": "the team's owners and admins", "config": {}},
        hook: {
            "kind": "webhook",
            "enabled": True,
            "destination": "hooks.example.test",
            "config": {"url": "https://hooks.example.test/a", "secret": "s3cret"},
        },
        "globex:Email to owners and admins": {
            "kind": "email",
            "enabled": True,
            "destination": "the team's owners and admins",
            "config": {},
        },
    }
    assert result["endpoints"] == {
        "mail only": {"all": False, "to": [mail]},
        "mail and hook": {"all": True, "to": [mail, hook]},
        "same hook": {"all": False, "to": [hook]},  # one channel for the two uses of the hook
        "silent": {"all": False, "to": []},
        "theirs": {"all": True, "to": ["globex:Email to owners and admins"]},
    }
