"""Create (once) the demo user, team and endpoint for the run command; print the login.

The endpoint points at the `tokvera target` the run command starts on loopback (its port is
DEMO_TARGET_PORT, which the Makefile derives from PORT) and is scanned every 5 minutes, so
grades appear without any network. `--login-when-up` prints only the ready banner (the login
and where its password is kept), once SITE_URL/healthz answers and, with `--after-workers N`,
once N Celery workers answer a ping (their start-up output is then on screen), so it comes
last in the run command's output; the periodic tasks stay quiet after it (common/logging.py)."""

import secrets
import time
import urllib.error
import urllib.request
from pathlib import Path

from celery import current_app
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction
from django.utils import timezone

from accounts import identity, teams
from common import demo_target
from common.paths import VAR_DIR
from scans.endpoints.service import DEMO_ENDPOINT_NAME, demo_endpoint_fields
from scans.grader import DEMO_MODEL_ID
from scans.models import Endpoint

DEMO_USERNAME = "demo"
DEMO_EMAIL = "demo@tokvera.local"
DEMO_TEAM = "demo"
WAIT_FOR_SITE_S = 120
#: After the workers answer: their last start-up lines (and beat's) reach the screen first.
SETTLE_S = 2.0


def _shown_path(path: Path) -> str:
    """`path` relative to the working directory when it is inside it (var/demo_password)."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def demo_target_url() -> str:
    """Where the run command starts `tokvera target` (Procfile.dev), on loopback: read when
    the command runs (each `make run` may give another port), 8090 by default."""
    return demo_target.demo_target_url() or "http://127.0.0.1:8090/v1"


class Command(BaseCommand):
    help = "Create the demo user and team if missing; print the login."

    def add_arguments(self, parser):
        parser.add_argument("--login-when-up", action="store_true",
                            help="only print the login line, once SITE_URL/healthz answers")
        parser.add_argument("--after-workers", type=int, default=0, metavar="N",
                            help="with --login-when-up: also wait until N Celery workers answer")

    def handle(self, login_when_up=False, after_workers=0, **options):
        if login_when_up:
            self._wait_for_site()
            if after_workers > 0:
                self._wait_for_workers(after_workers)
            self.stdout.write(self._ready_banner(self._password()))
            return
        self._seed()

    def _password(self) -> str:
        return (VAR_DIR / "demo_password").read_text().strip()

    def _login_line(self, password: str) -> str:
        return f"Demo login: {settings.SITE_URL}/login/  user: {DEMO_USERNAME}  password: {password}"

    def _ready_banner(self, password: str) -> str:
        """The login as the run command's last words, short enough for an 80-column terminal
        under the process manager's prefix."""
        rule = "=" * 58
        return "\n".join([
            rule,
            f"Tokvera is ready: {settings.SITE_URL}/",
            f"  Log in at  {settings.SITE_URL}/login/",
            f"  user       {DEMO_USERNAME}",
            f"  password   {password}",
            f"The password is kept in {_shown_path(VAR_DIR / 'demo_password')};",
            "delete that file and run again for a new one.",
            "Periodic tasks log warnings only",
            "(TOKVERA_PERIODIC_LOG_LEVEL=INFO shows each run).",
            "Ctrl-C stops everything.",
            rule,
        ])

    def _wait_for_site(self) -> None:
        url = f"{settings.SITE_URL}/healthz"
        deadline = time.monotonic() + WAIT_FOR_SITE_S
        while True:
            try:
                with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310 - our own site
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                raise CommandError(f"the site did not answer at {url} within {WAIT_FOR_SITE_S} s")
            time.sleep(0.5)

    def _wait_for_workers(self, count: int) -> None:
        """Until `count` workers answer a ping: a worker answers only once it consumes, after
        it has logged its start-up; then a short settle for the lines still in flight."""
        deadline = time.monotonic() + WAIT_FOR_SITE_S
        while len(current_app.control.ping(timeout=1.0) or []) < count:
            if time.monotonic() > deadline:
                raise CommandError(f"{count} Celery workers did not answer within "
                                   f"{WAIT_FOR_SITE_S} s")
            time.sleep(0.5)
        time.sleep(SETTLE_S)

    @transaction.atomic
    def _seed(self):
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
        identity.vouch_for_email(user)  # the site made it: no verification mail before the login
        team = teams.team_by_slug(DEMO_TEAM)
        if team is None:
            team = teams.create_team(DEMO_TEAM, "Demo team", owner=user)
        target_url = demo_target_url()
        demo = Endpoint.objects.for_team(team)
        if demo.filter(name=DEMO_ENDPOINT_NAME).exclude(base_url=target_url).exists():
            # PORT changed since the demo was made: the demo endpoint follows its target.
            demo.filter(name=DEMO_ENDPOINT_NAME).update(base_url=target_url)
        # The model the demo target lists at /models: under any other name it is degraded.
        demo.filter(name=DEMO_ENDPOINT_NAME).exclude(model=DEMO_MODEL_ID).update(model=DEMO_MODEL_ID)
        if not demo.exists():
            demo.create(team=team, **demo_endpoint_fields(target_url),
                        next_scan_at=timezone.now())
        self.stdout.write(self._login_line(password))
