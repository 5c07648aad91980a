"""Shared test helpers: factories for users, teams and tokens, and the `redis` marker.

The suite always runs on PostgreSQL (`make test` starts a throwaway embedded one when
DATABASE_URL is unset, and a throwaway Redis with it). Tests marked `redis` need a Redis broker;
a bare `pytest` without one skips them with the reason, and TOKVERA_REQUIRE_SERVICES=1 (set by
.ci/run) turns such a skip into a failure, so CI can never pass by silently skipping them.
"""

from __future__ import annotations

import contextlib
import os
import socket
import uuid
from dataclasses import dataclass
from urllib.parse import quote

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from accounts import identity, teams
from accounts.models import Membership, Role, Team

REQUIRE_SERVICES = os.environ.get("TOKVERA_REQUIRE_SERVICES") == "1"
AUTH_FAILURE_LIMIT_FOR_TESTS = 10**9


def _redis_url() -> str | None:
    url = settings.CELERY_BROKER_URL
    return url if url.startswith("redis") else None


def _skip_or_fail(reason: str):
    if REQUIRE_SERVICES:
        pytest.fail(f"CI requires this service: {reason}")
    pytest.skip(reason)


XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")  # "gw0", "gw1", … under `pytest -n N`


def _redis_keys_of_this_worker() -> None:
    """Under pytest-xdist every worker process runs beside the others on the same Redis
    databases (CELERY_BROKER_URL, CACHE_URL): each gets keys of its own, a broker key prefix
    (its queues, its workers' control messages) and a cache key prefix, here and, through the
    environment, in the processes its tests start (gunicorn, workers, beat). Its PostgreSQL
    test database is its own already (pytest-django names it after the worker)."""
    if not XDIST_WORKER:
        return
    prefix = f"tokvera-test-{XDIST_WORKER}"
    if settings.CELERY_BROKER_URL.startswith("redis"):
        from tokvera_site.celery import app

        os.environ["CELERY_BROKER_KEY_PREFIX"] = f"{prefix}:"
        settings.CELERY_BROKER_TRANSPORT_OPTIONS["global_keyprefix"] = f"{prefix}:"
        app.conf.broker_transport_options = {**app.conf.broker_transport_options,
                                             "global_keyprefix": f"{prefix}:"}
    cache_url = os.environ.get("CACHE_URL", "")
    if cache_url.startswith("redis") and settings.CACHES["default"]["BACKEND"].endswith("RedisCache"):
        from django.core.cache import caches

        separator = "&" if "?" in cache_url else "?"
        os.environ["CACHE_URL"] = f"{cache_url}{separator}key_prefix={prefix}"
        settings.CACHES["default"]["KEY_PREFIX"] = prefix
        with contextlib.suppress(AttributeError):
            del caches["default"]  # a cache made before now is made again, with the prefix


def broker_key(name: str) -> str:
    """The Redis key the broker keeps `name` (a queue) under, in this test process."""
    from tokvera_site.celery import app

    return app.conf.broker_transport_options.get("global_keyprefix", "") + name


def clear_cache() -> None:
    """Empty the cache of this test process: with a key prefix (each xdist worker has its own)
    only the keys under it, never the whole Redis database other workers use."""
    from django.core.cache import cache

    prefix = getattr(cache, "key_prefix", "")
    client = getattr(getattr(cache, "_cache", None), "get_client", None)
    if not prefix or client is None:
        cache.clear()
        return
    redis_client = client(write=True)
    keys = list(redis_client.scan_iter(match=f"{prefix}:*", count=1000))
    if keys:
        redis_client.delete(*keys)


def pytest_configure(config):
    _redis_keys_of_this_worker()
    # Fast hashing: tests create many users; production keeps Django's default hashers.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    # Every test calls from 127.0.0.1 into one shared cache: the suite's many deliberate 401s
    # must not add up to a per-address block in an unrelated test. The tests of the limit
    # itself (tests/accounts/test_auth_failures.py) set their own. The environment carries it
    # to the site processes tests start (gunicorn, workers).
    settings.AUTH_FAILURE_LIMIT = AUTH_FAILURE_LIMIT_FOR_TESTS
    os.environ["AUTH_FAILURE_LIMIT"] = str(AUTH_FAILURE_LIMIT_FOR_TESTS)
    # Tests must never leave messages in the run command's embedded broker (var/broker/):
    # give them a broker folder of their own.
    if settings.CELERY_BROKER_URL.startswith("filesystem://"):
        import tempfile

        from tokvera_site.celery import app

        folder = tempfile.mkdtemp(prefix="tokvera-test-broker-")
        app.conf.broker_transport_options = {
            "data_folder_in": folder, "data_folder_out": folder,
            "control_folder": folder, "store_processed": False,
        }


def pytest_collection_modifyitems(config, items):
    """Without a Chromium to drive (tests/helpers/browser.py says where one is looked for), the browser
    tests are left out and say so in one line at the end; CI (TOKVERA_REQUIRE_SERVICES=1)
    keeps them, so that a missing browser fails there."""
    marked = [item for item in items if item.get_closest_marker("browser")]
    if not marked or REQUIRE_SERVICES:
        return
    from tests.helpers.browser import chromium_path

    executable, reason = chromium_path()
    if executable is not None:
        return
    config.hook.pytest_deselected(items=marked)
    items[:] = [item for item in items if not item.get_closest_marker("browser")]
    config._tokvera_browser_note = f"{len(marked)} browser tests not run: {reason}"


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    note = getattr(config, "_tokvera_browser_note", None)
    if note:
        terminalreporter.write_line(note, yellow=True)


@pytest.fixture(scope="session", autouse=True)
def _fresh_cache():
    """Start each run from an empty cache (this process's keys): what an earlier run left, a
    rate limit keyed by a user id the new test database hands out again, must not decide this
    run's tests. A cache that cannot be reached is left to the tests that need it."""
    with contextlib.suppress(Exception):
        clear_cache()


@pytest.fixture(autouse=True)
def _service_markers(request):
    if request.node.get_closest_marker("redis") and _redis_url() is None:
        _skip_or_fail("needs a Redis broker; set CELERY_BROKER_URL=redis://127.0.0.1:6379/N")


def scratch_database(prefix: str, migrated: bool = False) -> str:
    """A new database on the test PostgreSQL server, for a test whose site runs in other
    processes (gunicorn, workers); its URL. Dropped at the end of the session. Empty, or with
    `migrated` a copy of a database migrated once per session (with the cache table): a
    `manage.py migrate` costs about 14 CPU-seconds, a copy a fraction of one."""
    import atexit

    import psycopg
    from django.db import connection

    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    admin = {**connection.get_connection_params(), "dbname": "postgres", "autocommit": True}
    template = f' TEMPLATE "{_migrated_template()}"' if migrated else ""
    with psycopg.connect(**admin) as conn:
        conn.execute(f'CREATE DATABASE "{name}"{template}')

    def drop():
        with psycopg.connect(**admin) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    atexit.register(drop)
    return database_url(name)


_template: list[str] = []  # the session's migrated template database, once made


def _migrated_template() -> str:
    """The name of a database migrated by `manage.py migrate` and `createcachetable` in a
    process of its own (the way a site's database is made), made on first use. Nothing ever
    connects to it but the copies' CREATE DATABASE."""
    if not _template:
        import subprocess
        import sys

        from tests.helpers.paths import ROOT

        url = scratch_database("template")
        env = {**os.environ, "DATABASE_URL": url, "CACHE_URL": "dbcache://tokvera_cache"}
        for command in (["migrate", "--noinput", "-v", "0"], ["createcachetable"]):
            done = subprocess.run([sys.executable, "manage.py", *command], cwd=ROOT, env=env,
                                  capture_output=True, text=True, timeout=300, check=False)
            assert done.returncode == 0, done.stderr[-3000:]
        _template.append(url.rsplit("/", 1)[1])
    return _template[0]


def database_url(dbname: str | None = None) -> str:
    """A DATABASE_URL for another process (a worker, gunicorn) to reach the database the tests
    use (or `dbname` on the same server); a Unix socket folder is percent-encoded as the host."""
    from django.db import connection

    params = connection.settings_dict
    host = quote(params["HOST"] or "", safe="")
    port = f":{params['PORT']}" if params["PORT"] else ""
    password = f":{quote(params['PASSWORD'], safe='')}" if params["PASSWORD"] else ""
    user = quote(params["USER"] or "", safe="")
    return f"postgres://{user}{password}@{host}{port}/{dbname or params['NAME']}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_user(name: str | None = None, password: str = "correct horse battery staple"):
    name = name or f"user-{uuid.uuid4().hex[:8]}"
    user = get_user_model().objects.create_user(
        username=name, email=f"{name}@example.test", password=password
    )
    identity.vouch_for_email(user)  # as an invitation or operator would: it may log in at once
    return user


@dataclass
class TeamWorld:
    """A team with one user per role, an outsider (member of another team) and tokens."""

    team: Team
    other_team: Team
    owner: object
    admin: object
    member: object
    viewer: object
    outsider: object
    target: object  # a plain member whom the role/remove cases act on
    read_only_token: str
    read_write_token: str
    other_team_token: str

    def user(self, role: str):
        return getattr(self, role)


def build_world() -> TeamWorld:
    tag = uuid.uuid4().hex[:6]
    owner = make_user(f"owner-{tag}")
    team = teams.create_team(f"acme-{tag}", "Acme", owner=owner)
    users = {}
    for role in (Role.ADMIN, Role.MEMBER, Role.VIEWER):
        users[role] = make_user(f"{role}-{tag}")
        Membership.dangerously_unscoped.create(team=team, user=users[role], role=role)
    # The viewer owns a team of their own: a role elsewhere must not leak into this team.
    teams.create_team(f"viewer-own-{tag}", "Viewer's own", owner=users[Role.VIEWER])
    target = make_user(f"target-{tag}")
    Membership.dangerously_unscoped.create(team=team, user=target, role=Role.MEMBER)
    outsider = make_user(f"outsider-{tag}")
    other = teams.create_team(f"globex-{tag}", "Globex", owner=outsider)
    return TeamWorld(
        team=team,
        other_team=other,
        owner=owner,
        admin=users[Role.ADMIN],
        member=users[Role.MEMBER],
        viewer=users[Role.VIEWER],
        outsider=outsider,
        target=target,
        read_only_token=teams.issue_token(team, "read-only")[1],
        read_write_token=teams.issue_token(team, "read-write")[1],
        other_team_token=teams.issue_token(other, "read-write")[1],
    )


@pytest.fixture
def world(db) -> TeamWorld:
    return build_world()


@pytest.fixture
def api() -> APIClient:
    return APIClient()


def bearer(token: str) -> dict:
    return {"HTTP_AUTHORIZATION": f"Bearer {token}"}


@pytest.fixture
def eager_tasks():
    """Run Celery tasks in-process when sent (for tests about what a task does, not how it
    is delivered; delivery is tested with a real worker in tests/scans/running)."""
    from tokvera_site.celery import app

    app.conf.task_always_eager = True
    app.conf.task_eager_propagates = True
    yield
    app.conf.task_always_eager = False
    app.conf.task_eager_propagates = False


from tests.helpers.browser import browser  # noqa: E402, F401 - the shared Playwright fixture
