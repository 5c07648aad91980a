"""The Celery app is loaded in every Django process and found by `celery -A tokvera_site`,
though tokvera_site/__init__ no longer imports it (the `tokvera` command starts
without Django or Celery). Fresh interpreters, so no other test has loaded the app first."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.helpers.paths import ROOT


def _python(code: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, cwd=ROOT,
                          env={**os.environ, "DJANGO_SETTINGS_MODULE": "tokvera_site.settings"})
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.split()


def test_a_django_process_sends_tasks_through_the_projects_app_and_broker():
    """shared_task resolves to the current app: without the project's, a web process would send
    to Celery's default app and its default amqp broker."""
    code = ("import sys, django; django.setup(); "
            "print('tokvera_site.celery' in sys.modules); "
            "from django.conf import settings; from scans.tasks import run_scan; "
            "print(run_scan.app.main, run_scan.app.conf.broker_url == settings.CELERY_BROKER_URL)")
    assert _python(code) == ["True", "tokvera", "True"]


def test_celery_dash_a_finds_the_app_as_tokvera_site_celery():
    code = ("from celery.app.utils import find_app; app = find_app('tokvera_site'); "
            "import tokvera_site.celery as c; print(app is c.app, app.main)")
    assert _python(code) == ["True", "tokvera"]
