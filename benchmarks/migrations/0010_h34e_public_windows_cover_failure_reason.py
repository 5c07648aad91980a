"""The public benchmark snapshot's covering index (0002) also covers `failure_reason`: the job
windows query counts failures a host caused apart from jobs no host took (`no_host`,
benchmarks/snapshot.py), and still answers from the index alone.

The new index is built CONCURRENTLY beside the old one (no write to the job table waits for it),
then the old one is dropped CONCURRENTLY and the new one takes its name. Outside the model state,
as 0002 explains.
"""

from django.db import migrations

INDEX = "job_public_windows_idx"
BUILDING = "job_public_windows_next_idx"
KEY = "(model_id, settled_at)"
WHERE = "WHERE settled_at IS NOT NULL"


def _replace(schema_editor, include: str) -> None:
    schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {BUILDING}")  # a build cut short
    schema_editor.execute(
        f"CREATE INDEX CONCURRENTLY {BUILDING} ON benchmarks_job {KEY} INCLUDE ({include}) {WHERE}"
    )
    schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {INDEX}")
    schema_editor.execute(f"ALTER INDEX {BUILDING} RENAME TO {INDEX}")


def cover_failure_reason(apps, schema_editor):
    _replace(schema_editor, "status, created_at, completed_at, failure_reason")


def uncover_failure_reason(apps, schema_editor):
    _replace(schema_editor, "status, created_at, completed_at")


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("benchmarks", "0009_job_settled_by_model_index_covered"),
    ]

    operations = [
        migrations.RunPython(cover_failure_reason, uncover_failure_reason, elidable=False),
    ]
