"""An index for the proof workers' turns (scans/running/pushes.py): which team's pushed report is proven
next is decided by when each waiting team's last proof started, so the claim reads the recent
starts of pushed scans, newest first, without reading scheduled scans at all.

It is created CONCURRENTLY, so a deploy does not block writes to the scan table while it builds
(hence a non-atomic migration). It lives outside the model state, like the public benchmark
index (benchmarks/migrations/0002): an access path for one query, not a fact about the data.
"""

from django.db import migrations

INDEX = "scan_pushed_started_idx"


def create(apps, schema_editor):
    schema_editor.execute(
        f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {INDEX} ON scans_scan (started_at) "
        "INCLUDE (endpoint_id) WHERE trigger = 'push' AND started_at IS NOT NULL"
    )


def drop(apps, schema_editor):
    schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {INDEX}")


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("scans", "0021_delivery_plural_name"),
    ]

    operations = [
        migrations.RunPython(create, drop, elidable=False),
    ]
