"""Hosts and jobs point at accounts.Team (model state only: the table and its rows are the same)."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0001_initial"),
        ("benchmarks", "0003_job_team_unsettled_index"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[
                migrations.AlterField(
                    model_name="host",
                    name="team",
                    field=models.ForeignKey(
                        help_text="The team that operates this host.",
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="hosts",
                        to="accounts.team",
                    ),
                ),
                migrations.AlterField(
                    model_name="job",
                    name="team",
                    field=models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="jobs", to="accounts.team"
                    ),
                ),
            ],
        )
    ]
