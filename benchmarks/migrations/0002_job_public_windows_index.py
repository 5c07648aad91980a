"""A covering index for the public benchmark snapshot (benchmarks/snapshot.py).

The snapshot reads, per active model, every job settled in the last 30 days: its status, when
it was submitted and when it completed. With those columns in the index (INCLUDE), PostgreSQL
answers from the index alone (an index-only scan, in model order, so no sort for GROUP BY)
instead of reading the whole job table, whose rows also carry the request and result bodies:
364 MB instead of 3.5 GB at 5 million jobs (tests/perf/bench_public.py).

It is created CONCURRENTLY, so a deploy does not block writes to the job table while it builds
(hence a non-atomic migration). It lives outside the model state on purpose: the model's indexes
describe the data; this one is an access path for one query.
"""

from django.db import migrations

INDEX = "job_public_windows_idx"


def create(apps, schema_editor):
    schema_editor.execute(
        f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {INDEX} ON benchmarks_job "
        "(model_id, settled_at) INCLUDE (status, created_at, completed_at) "
        "WHERE settled_at IS NOT NULL"
    )


def drop(apps, schema_editor):
    schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {INDEX}")


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("benchmarks", "0001_initial"),
    ]

    operations = [
        migrations.RunPython(create, drop, elidable=False),
    ]
