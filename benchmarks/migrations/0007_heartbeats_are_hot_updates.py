"""Heartbeats as HOT updates (issue 25): the index on last_heartbeat_at goes (each heartbeat
rewrote it, so each UPDATE wrote every index of the table), and the table keeps 30 % of each
page free so the new row version fits beside the old one (PostgreSQL's heap-only tuples)."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("benchmarks", "0006_public_refresh_task_renamed"),
    ]

    operations = [
        migrations.RemoveIndex(model_name="host", name="host_heartbeat_idx"),
        migrations.RunSQL(
            "ALTER TABLE benchmarks_host SET (fillfactor = 70)",
            reverse_sql="ALTER TABLE benchmarks_host RESET (fillfactor)",
        ),
    ]
