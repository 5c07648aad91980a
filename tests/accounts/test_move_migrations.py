"""Teams, memberships, invitations and API tokens moved from the scans app to accounts. A database
migrated before the move, with rows in every table, migrates forward and keeps every row.

The "before" database is built by the project's own migrations up to the last ones before the
move (scans 0007, benchmarks 0003, no accounts), filled through the historical models of that
state, then migrated to the latest state, all in a separate process on a scratch database."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.conftest import scratch_database
from tests.helpers.paths import ROOT

MOVED = {"scans_team": "accounts_team", "scans_membership": "accounts_membership",
         "scans_invitation": "accounts_invitation", "scans_apitoken": "accounts_apitoken"}

# Columns a later migration removed on purpose, where their values went tested elsewhere:
# scans 0017, the endpoint's alert settings, now notification channels
# (tests/scans/notify/test_channels_migration.py).
REMOVED_LATER = {"scans_endpoint": {"alert_email", "webhook_url", "webhook_secret_encrypted"}}

SCRIPT = r'''
import datetime, decimal, json, uuid
import django
django.setup()
from django.db import connection, models
from django.db.migrations.executor import MigrationExecutor

BEFORE = {"scans": "0007_team_badge_site_measured_only",
          "benchmarks": "0003_job_team_unsettled_index", "accounts": None, "audit": None}
PROJECT_APPS = ("scans", "benchmarks")


def targets_before(executor):
    leaves = [n for n in executor.loader.graph.leaf_nodes() if n[0] not in BEFORE]
    return leaves + [(app, name) for app, name in BEFORE.items()]


def value_for(field, n):
    if field.choices:
        return field.choices[0][0]
    if isinstance(field, models.EmailField):
        return f"row{n}@example.test"
    if isinstance(field, (models.CharField, models.SlugField, models.TextField)):
        return f"r{n}-{field.name}"[: getattr(field, "max_length", None) or 100]
    if isinstance(field, models.BooleanField):
        return False
    if isinstance(field, (models.IntegerField, models.PositiveIntegerField)):
        return 1
    if isinstance(field, models.FloatField):
        return 1.5
    if isinstance(field, models.DecimalField):
        return decimal.Decimal("1.0")
    if isinstance(field, models.DateTimeField):
        return datetime.datetime(2026, 11, 1, tzinfo=datetime.UTC)
    if isinstance(field, models.UUIDField):
        return uuid.uuid4()
    if isinstance(field, models.JSONField):
        return {"kept": n}
    raise TypeError(f"no value for {field.model.__name__}.{field.name} ({type(field).__name__})")


def fill(apps):
    """One row per model of the project apps (and a user), each foreign key pointing at a row."""
    user = apps.get_model("auth", "User").objects.create(username="mover", email="m@example.test")
    made = {("auth", "user"): user}
    pending = [m for m in apps.get_models() if m._meta.app_label in PROJECT_APPS]
    n = 0
    while pending:
        progress = False
        for model in list(pending):
            fks = [f for f in model._meta.concrete_fields if f.is_relation]
            needed = [(f.related_model._meta.app_label, f.related_model._meta.model_name)
                      for f in fks if not f.null]
            if any(key not in made for key in needed):
                continue
            n += 1
            values = {}
            for f in model._meta.concrete_fields:
                if f.primary_key and (f.has_default() or isinstance(f, models.AutoField)):
                    continue
                if f.is_relation:
                    key = (f.related_model._meta.app_label, f.related_model._meta.model_name)
                    if key in made:
                        values[f.attname] = made[key].pk
                    continue
                if f.has_default() or f.null or getattr(f, "auto_now", False) \
                        or getattr(f, "auto_now_add", False):
                    continue
                values[f.attname] = value_for(f, n)
            obj = model._base_manager.create(**values)
            made[(model._meta.app_label, model._meta.model_name)] = obj
            for m2m in model._meta.many_to_many:
                key = (m2m.related_model._meta.app_label, m2m.related_model._meta.model_name)
                if key in made:
                    getattr(obj, m2m.name).add(made[key])
            pending.remove(model)
            progress = True
        assert progress, f"cannot order {[m.__name__ for m in pending]}"


def snapshot():
    with connection.cursor() as cursor:
        tables = [t for t in connection.introspection.table_names(cursor)
                  if t.startswith(("scans_", "accounts_", "benchmarks_"))]
        rows = {}
        for table in tables:
            cursor.execute(f'SELECT * FROM "{table}" ORDER BY 1')
            names = [column.name for column in cursor.description]
            rows[table] = [dict(zip(names, map(str, row), strict=True)) for row in cursor.fetchall()]
        cursor.execute("SELECT app_label, model FROM django_content_type "
                       "WHERE model IN ('team', 'membership', 'invitation', 'apitoken')")
        content_types = sorted(cursor.fetchall())
    return {"rows": rows, "content_types": content_types}


executor = MigrationExecutor(connection)
before_targets = targets_before(executor)
executor.migrate(before_targets)
old_apps = executor.loader.project_state([t for t in before_targets if t[1]]).apps
fill(old_apps)
# The content types a deployed site had for the models (created after each migrate).
content_type = old_apps.get_model("contenttypes", "ContentType")
for model in ("team", "membership", "invitation", "apitoken", "endpoint"):
    content_type.objects.get_or_create(app_label="scans", model=model)
before = snapshot()

executor = MigrationExecutor(connection)
executor.migrate(executor.loader.graph.leaf_nodes())
after = snapshot()
print(json.dumps({"before": before, "after": after}))
'''


def test_a_database_from_before_the_move_migrates_forward_and_keeps_every_row():
    env = {**os.environ, "DATABASE_URL": scratch_database("move"),
           "DJANGO_SETTINGS_MODULE": "tokvera_site.settings"}
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    before, after = result["before"]["rows"], result["after"]["rows"]

    assert all(before[table] for table in before), {t: len(r) for t, r in before.items()}
    for table, rows in before.items():
        new = MOVED.get(table, table)
        if new != table:
            assert table not in after, f"{table} was not renamed"
        # Every row and every value it had; later migrations may add columns, and lose only
        # those REMOVED_LATER names (moved elsewhere, with their own migration test).
        gone = REMOVED_LATER.get(new, set())
        kept = [{column: row[column] for column in rows[0] if column not in gone}
                for row in after[new]]
        assert kept == [{c: v for c, v in row.items() if c not in gone} for row in rows], (
            f"{table} → {new} changed")
    assert ["scans", "team"] in result["before"]["content_types"]
    assert ["accounts", "team"] in result["after"]["content_types"]
    assert ["scans", "team"] not in result["after"]["content_types"]
