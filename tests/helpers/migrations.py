"""Migration tests run in another process on a scratch copy of a migrated database (a
migration test must not move the session's test database): `run_migration_script` runs
PRELUDE, then the test's own script, which migrates with `migrate(target)` (it returns that
state's apps), and reads the JSON object its last line prints."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.conftest import scratch_database
from tests.helpers.paths import ROOT

__all__ = ["PRELUDE", "run_migration_script"]

PRELUDE = r"""
import json, sys
from datetime import UTC, datetime, timedelta
import django
django.setup()
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

BEFORE, AFTER = tuple(sys.argv[1].split(":")), tuple(sys.argv[2].split(":"))


def migrate(target):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate([target])
    return executor.loader.project_state(target).apps
"""


def run_migration_script(prefix: str, script: str, before: tuple[str, str],
                         after: tuple[str, str]) -> dict:
    """Run PRELUDE + `script` with BEFORE and AFTER set; the JSON its last line prints."""
    env = {**os.environ, "DATABASE_URL": scratch_database(prefix, migrated=True),
           "DJANGO_SETTINGS_MODULE": "tokvera_site.settings"}
    done = subprocess.run([sys.executable, "-c", PRELUDE + script, ":".join(before),
                           ":".join(after)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
