"""Create (once) the demo user, team and endpoint for the run command; print the login.

The endpoint points at the `tokvera target` the run command starts on loopback and is
scanned every 5 minutes, so grades appear without any network."""

import secrets

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction
from django.utils import timezone

from accounts import teams
from accounts.models import Team
from scans.models import Endpoint
from tokvera_site.config import VAR_DIR

DEMO_USERNAME = "demo"
DEMO_EMAIL = "demo@tokvera.local"
DEMO_TEAM = "demo"
# The run command starts `tokvera target` here (Procfile.dev), a reference server on loopback.
DEMO_TARGET_URL = "http://127.0.0.1:8090/v1"


class Command(BaseCommand):
    help = "Create the demo user and team if missing; print the login."

    @transaction.atomic
    def handle(self, **options):
        User = get_user_model()
        password_file = VAR_DIR / "demo_password"
        fresh = not password_file.exists()
        if fresh:
            password_file.write_text(secrets.token_urlsafe(12))
            password_file.chmod(0o600)
        password = password_file.read_text().strip()
        user = User.objects.filter(username=DEMO_USERNAME).first()
        if user is None or fresh:
            user = user or User(username=DEMO_USERNAME, email=DEMO_EMAIL)
            user.set_password(password)
            user.save()
        team = Team.dangerously_unscoped.filter(slug=DEMO_TEAM).first()
        if team is None:
            team = teams.create_team(DEMO_TEAM, "Demo team", owner=user)
        if not Endpoint.dangerously_unscoped.filter(team=team).exists():
            Endpoint.dangerously_unscoped.create(
                team=team, name="Demo target", base_url=DEMO_TARGET_URL, model="demo-model",
                levels=[1, 4, 8], requests_per_level=12, max_tokens=48, timeout_s=30,
                interval_minutes=5, slo_grade_floor="B", slo_ttft_p95_ms=400,
                next_scan_at=timezone.now(),
            )
        self.stdout.write(
            f"Demo login: {settings.SITE_URL}/login/  user: {DEMO_USERNAME}  password: {password}"
        )
