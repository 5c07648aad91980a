"""Create (once) the demo user and team for the run command, and print how to log in."""

import secrets

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction

from scans import teams
from scans.models import Team
from tokvera_site.config import VAR_DIR

DEMO_USERNAME = "demo"
DEMO_EMAIL = "demo@tokvera.local"
DEMO_TEAM = "demo"


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
        self.stdout.write(
            f"Demo login: {settings.SITE_URL}/login/  user: {DEMO_USERNAME}  password: {password}"
        )
