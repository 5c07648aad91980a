"""Teams, memberships, invitations and tokens now belong to accounts (model state only; see
accounts/migrations/0001_initial.py). No table or row changes here."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0001_initial"),
        ("benchmarks", "0004_team_moved_to_accounts"),
        ("scans", "0007_team_badge_site_measured_only"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[
                migrations.RemoveField(
                    model_name="invitation",
                    name="accepted_by",
                ),
                migrations.RemoveField(
                    model_name="invitation",
                    name="invited_by",
                ),
                migrations.RemoveField(
                    model_name="invitation",
                    name="team",
                ),
                migrations.RemoveField(
                    model_name="membership",
                    name="team",
                ),
                migrations.RemoveField(
                    model_name="membership",
                    name="user",
                ),
                migrations.AlterField(
                    model_name="endpoint",
                    name="team",
                    field=models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="endpoints",
                        to="accounts.team",
                    ),
                ),
                migrations.DeleteModel(
                    name="ApiToken",
                ),
                migrations.DeleteModel(
                    name="Invitation",
                ),
                migrations.DeleteModel(
                    name="Membership",
                ),
                migrations.DeleteModel(
                    name="Team",
                ),
            ],
        )
    ]
