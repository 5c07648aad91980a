"""The proof workers' turns read one small row per waiting team (scans/running/pushes.py, claim_turn):

- `Scan.proof_team`, the endpoint's team copied onto a pushed scan, and a partial index of the
  queued pushed scans on (proof_team_id, queued_at, id): the distinct waiting teams are read by
  skipping through it, and each team's oldest report is its first entry;
- `ProofTurn`, when each team's last proof started, written with the claim;
- the index of pushed scans by start time (0022, `scan_pushed_started_idx`) is dropped: nothing
  reads recent starts any more.

Queued pushed scans stored before this (or by a web process of the previous release) have no
proof_team; the claim copies it from their endpoint before choosing, so none is left behind.

The indexes are created and dropped CONCURRENTLY (a non-atomic migration), outside the model
state like 0022: access paths for one query. The new column is nullable with no constraint, so
adding it neither rewrites nor scans the table.
"""

import django.db.models.deletion
import django.db.models.manager
from django.db import migrations, models

INDEX = "scan_proof_waiting"
OLD_INDEX = "scan_pushed_started_idx"


def create(apps, schema_editor):
    schema_editor.execute(
        f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {INDEX} ON scans_scan "
        "(proof_team_id, queued_at, id) WHERE status = 'queued' AND trigger = 'push'"
    )
    schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {OLD_INDEX}")


def drop(apps, schema_editor):
    schema_editor.execute(
        f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {OLD_INDEX} ON scans_scan (started_at) "
        "INCLUDE (endpoint_id) WHERE trigger = 'push' AND started_at IS NOT NULL"
    )
    schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {INDEX}")


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("accounts", "0004_existing_accounts_emails_verified"),
        ("scans", "0024_h34c_repair_unreadable_maintenance_windows"),
    ]

    operations = [
        migrations.AddField(
            model_name="scan",
            name="proof_team",
            field=models.ForeignKey(blank=True, db_constraint=False, db_index=False, null=True,
                                    on_delete=django.db.models.deletion.DO_NOTHING,
                                    related_name="+", to="accounts.team"),
        ),
        migrations.CreateModel(
            name="ProofTurn",
            fields=[
                ("team", models.OneToOneField(on_delete=django.db.models.deletion.CASCADE,
                                              primary_key=True, related_name="+",
                                              serialize=False, to="accounts.team")),
                ("last_started_at", models.DateTimeField()),
            ],
            options={"abstract": False, "default_manager_name": "dangerously_unscoped",
                     "base_manager_name": "dangerously_unscoped"},
            managers=[("dangerously_unscoped", django.db.models.manager.Manager())],
        ),
        migrations.RunPython(create, drop, elidable=False),
    ]
