"""Indexes for the retention pass that deletes hourly rollups past HOURLY_ROLLUP_RETENTION_DAYS
(scans/history/rollups.py, prune_hours): the hours only, by age. Built CONCURRENTLY: the
rollup tables are large on a big site, and the rollup pass writes them every 5 minutes."""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):

    atomic = False

    dependencies = [
        ("scans", "0035_report_lz4"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="checkrollup",
            index=models.Index(condition=models.Q(("period", "hour")), fields=["bucket_start"],
                               name="check_rollup_hour_age"),
        ),
        AddIndexConcurrently(
            model_name="scanrollup",
            index=models.Index(condition=models.Q(("period", "hour")), fields=["bucket_start"],
                               name="scan_rollup_hour_age"),
        ),
    ]
