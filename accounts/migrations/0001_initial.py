"""Teams, memberships, invitations and API tokens move from the scans app to accounts.

The rows stay where they are: this migration only tells Django's model state that the four
models now belong to accounts (their tables are still scans_*); 0002 renames the tables once
the other apps' foreign keys point here. Nothing is copied, so nothing can be lost."""

import uuid

import django.db.models.deletion
import django.db.models.manager
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
        ("scans", "0007_team_badge_site_measured_only"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[
                migrations.CreateModel(
                    name="Team",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        ("slug", models.SlugField(unique=True)),
                        ("name", models.CharField(max_length=100)),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        ("badge_site_measured_only", models.BooleanField(default=False)),
                    ],
                    options={
                        "db_table": "scans_team",
                        "ordering": ["name"],
                        "abstract": False,
                        "base_manager_name": "dangerously_unscoped",
                        "default_manager_name": "dangerously_unscoped",
                    },
                    managers=[
                        ("dangerously_unscoped", django.db.models.manager.Manager()),
                    ],
                ),
                migrations.CreateModel(
                    name="Invitation",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        ("public_id", models.UUIDField(default=uuid.uuid4, editable=False, unique=True)),
                        ("email", models.EmailField(max_length=254)),
                        (
                            "role",
                            models.CharField(
                                choices=[
                                    ("owner", "Owner"),
                                    ("admin", "Admin"),
                                    ("member", "Member"),
                                    ("viewer", "Viewer"),
                                ],
                                default="member",
                                max_length=10,
                            ),
                        ),
                        ("secret_hash", models.CharField(max_length=64, unique=True)),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        ("expires_at", models.DateTimeField()),
                        ("accepted_at", models.DateTimeField(blank=True, null=True)),
                        (
                            "accepted_by",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.SET_NULL,
                                related_name="+",
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                        (
                            "invited_by",
                            models.ForeignKey(
                                null=True,
                                on_delete=django.db.models.deletion.SET_NULL,
                                related_name="+",
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                        (
                            "team",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="invitations",
                                to="accounts.team",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "scans_invitation",
                        "ordering": ["-created_at"],
                        "abstract": False,
                        "base_manager_name": "dangerously_unscoped",
                        "default_manager_name": "dangerously_unscoped",
                    },
                    managers=[
                        ("dangerously_unscoped", django.db.models.manager.Manager()),
                    ],
                ),
                migrations.CreateModel(
                    name="Membership",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        ("public_id", models.UUIDField(default=uuid.uuid4, editable=False, unique=True)),
                        (
                            "role",
                            models.CharField(
                                choices=[
                                    ("owner", "Owner"),
                                    ("admin", "Admin"),
                                    ("member", "Member"),
                                    ("viewer", "Viewer"),
                                ],
                                default="member",
                                max_length=10,
                            ),
                        ),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        (
                            "user",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="memberships",
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                        (
                            "team",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="memberships",
                                to="accounts.team",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "scans_membership",
                        "ordering": ["created_at"],
                        "abstract": False,
                        "base_manager_name": "dangerously_unscoped",
                        "default_manager_name": "dangerously_unscoped",
                        "constraints": [
                            models.UniqueConstraint(
                                fields=("user", "team"), name="one_membership_per_user_team"
                            )
                        ],
                    },
                    managers=[
                        ("dangerously_unscoped", django.db.models.manager.Manager()),
                    ],
                ),
                migrations.CreateModel(
                    name="ApiToken",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        ("public_id", models.UUIDField(default=uuid.uuid4, editable=False, unique=True)),
                        ("name", models.CharField(max_length=100)),
                        ("prefix", models.CharField(max_length=16, unique=True)),
                        ("secret_hmac", models.CharField(max_length=64)),
                        (
                            "scope",
                            models.CharField(
                                choices=[("read-only", "Read-only"), ("read-write", "Read-write")],
                                max_length=10,
                            ),
                        ),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        ("expires_at", models.DateTimeField(blank=True, null=True)),
                        ("last_used_at", models.DateTimeField(blank=True, null=True)),
                        ("revoked_at", models.DateTimeField(blank=True, null=True)),
                        (
                            "created_by",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.SET_NULL,
                                related_name="+",
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                        (
                            "team",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="api_tokens",
                                to="accounts.team",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "scans_apitoken",
                        "ordering": ["-created_at"],
                        "abstract": False,
                        "base_manager_name": "dangerously_unscoped",
                        "default_manager_name": "dangerously_unscoped",
                        "constraints": [
                            models.CheckConstraint(
                                condition=models.Q(("scope__in", ["read-only", "read-write"])),
                                name="api_token_scope_valid",
                            )
                        ],
                    },
                    managers=[
                        ("dangerously_unscoped", django.db.models.manager.Manager()),
                    ],
                ),
            ],
        )
    ]
