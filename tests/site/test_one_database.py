"""One database everywhere: the embedded PostgreSQL of `make run` / `make test`, a cache that every
process shares, and commands and pages that work with DEBUG off on a fresh clone.

The embedded servers here live in tmp_path folders of their own; the machine's PostgreSQL is
never stopped."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest

from tests.conftest import free_port, scratch_database
from tests.helpers.paths import ROOT
from tokvera_site.devservices import EmbeddedPostgres, ServiceError


def _devservices(*args, env=None, timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tokvera_site.devservices", *args], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=timeout)


def _fresh_env(var_dir: Path, **extra) -> dict:
    """A newcomer's environment: no DATABASE_URL, CACHE_URL or broker; state under var_dir."""
    env = {k: v for k, v in os.environ.items()
           if k not in {"DATABASE_URL", "CACHE_URL", "CELERY_BROKER_URL", "DEBUG"}}
    return {**env, "TOKVERA_VAR_DIR": str(var_dir), **extra}


def test_embedded_postgres_keeps_its_data_between_runs(tmp_path):
    var = tmp_path / "var"
    write = "from django.db import connection; c = connection.cursor(); " \
            "c.execute('CREATE TABLE kept (v text)'); c.execute(\"INSERT INTO kept VALUES ('x')\")"
    read = "from django.db import connection; c = connection.cursor(); " \
           "c.execute('SELECT v FROM kept'); print(c.fetchone()[0])"
    try:
        first = _devservices("run", "--", sys.executable, "manage.py", "shell", "-c", write,
                             env=_fresh_env(var))
        assert first.returncode == 0, first.stderr
        assert not EmbeddedPostgres(var / "postgres").is_running(), "stopped when the command ended"
        second = _devservices("run", "--", sys.executable, "manage.py", "shell", "-c", read,
                              env=_fresh_env(var))
        assert second.returncode == 0, second.stderr
        assert second.stdout.strip().endswith("x")
    finally:
        EmbeddedPostgres(var / "postgres").stop()


def test_a_killed_server_leaves_no_lock_that_blocks_the_next_start(tmp_path):
    server = EmbeddedPostgres(tmp_path / "pg").start()
    try:
        pid = int((tmp_path / "pg" / "postmaster.pid").read_text().split()[0])
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while server.is_running() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert (tmp_path / "pg" / "postmaster.pid").exists(), "the crash left its lock file behind"

        again = EmbeddedPostgres(tmp_path / "pg").start()
        with psycopg.connect(again.url("postgres")) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
    finally:
        EmbeddedPostgres(tmp_path / "pg").stop()


def test_a_data_folder_of_another_major_version_is_refused_in_one_line_and_left_untouched(tmp_path):
    data = tmp_path / "pg"
    data.mkdir()
    (data / "PG_VERSION").write_text("16\n")
    (data / "base").mkdir()
    (data / "base" / "precious").write_text("do not touch")
    before = sorted(p.relative_to(data).as_posix() for p in data.rglob("*"))

    with pytest.raises(ServiceError) as refused:
        EmbeddedPostgres(data).start()

    message = str(refused.value)
    assert "\n" not in message
    assert "PostgreSQL 16" in message and "DATABASE_URL" in message
    assert sorted(p.relative_to(data).as_posix() for p in data.rglob("*")) == before
    assert (data / "base" / "precious").read_text() == "do not touch"


def test_the_run_command_says_in_one_line_why_the_server_did_not_start(tmp_path):
    var = tmp_path / "var"
    (var / "postgres").mkdir(parents=True)
    (var / "postgres" / "PG_VERSION").write_text("15\n")
    done = _devservices("run", "--", sys.executable, "-c", "print('never')", env=_fresh_env(var))
    assert done.returncode != 0
    assert "never" not in done.stdout
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("tokvera: ") and "PostgreSQL 15" in line


def test_a_sqlite_url_is_refused_naming_the_supported_scheme():
    code = "from tokvera_site import config; config.exit_on_config_error(config.database)"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "DATABASE_URL": "sqlite:///tmp/x.sqlite3"}, timeout=60)
    assert done.returncode == 2
    assert "postgres://" in done.stderr and len(done.stderr.strip().splitlines()) == 1


# --- DEBUG off on a fresh clone, and one cache for every process ------------------------------


def _generated_at(env) -> str:
    """What GET /benchmarks serves to a request in a process of its own (a fresh web process)."""
    code = ("import django; django.setup(); from django.test import Client; "
            "r = Client(HTTP_HOST='127.0.0.1').get('/benchmarks'); "
            "assert r.status_code == 200, r.status_code; "
            "import re; print(re.search(r'data-generated-at=\"([^\"]+)\"', r.content.decode())[1])")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          env={**env, "DJANGO_SETTINGS_MODULE": "tokvera_site.settings"}, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip().splitlines()[-1]


@pytest.fixture
def fresh_site(tmp_path):
    """A checkout as a newcomer has it: no collected static files, DEBUG off, the default
    (database) cache, a migrated database of its own."""
    # Migrated as `manage.py migrate` and `createcachetable` make it (a copy of the session's).
    env = _fresh_env(tmp_path / "var", DATABASE_URL=scratch_database("fresh", migrated=True),
                     DEBUG="0")
    assert not (tmp_path / "var" / "static" / "staticfiles.json").exists()
    return env


def test_refresh_benchmarks_with_debug_off_changes_what_other_processes_serve_at_once(fresh_site):
    first = _generated_at(fresh_site)
    time.sleep(1.1)  # generated_at has whole seconds: a rebuild now would carry a later one
    # Another process serves the copy the first one built: the cache is shared, not per process.
    assert _generated_at(fresh_site) == first
    done = subprocess.run([sys.executable, "manage.py", "refresh_benchmarks"], cwd=ROOT,
                          env=fresh_site, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]

    assert _generated_at(fresh_site) > first


def test_every_public_page_renders_with_debug_off_and_no_collectstatic(fresh_site):
    code = ("import django; django.setup(); from django.test import Client; "
            "c = Client(HTTP_HOST='127.0.0.1'); "
            "paths = ['/benchmarks', '/benchmarks/methodology', '/v1/slo', '/v1/stats', '/login/', "
            "'/healthz']; "
            "print(' '.join(f'{p}={c.get(p).status_code}' for p in paths)); "
            "html = c.get('/benchmarks').content.decode(); "
            "import re; css = re.findall(r'href=\"(/static/[^\"]+)\"', html); "
            "print(' '.join(f'{u}={c.get(u).status_code}' for u in css))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          env={**fresh_site, "DJANGO_SETTINGS_MODULE": "tokvera_site.settings"},
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    pages, assets = done.stdout.strip().splitlines()[-2:]
    statuses = dict(item.split("=") for item in pages.split())
    assert statuses.pop("/healthz") in {"200", "503"}  # the broker may be absent here
    assert set(statuses.values()) == {"200"}, pages
    assert assets and all(a.endswith("=200") for a in assets.split()), assets


def test_healthz_answers_503_naming_the_database_when_its_server_is_down(tmp_path):
    port = free_port()  # nothing listens here
    env = {**os.environ, "DATABASE_URL": f"postgres://postgres@127.0.0.1:{port}/gone",
           "DJANGO_SETTINGS_MODULE": "tokvera_site.settings", "DEBUG": "0"}
    code = ("import django; django.setup(); from django.test import Client; "
            "r = Client(HTTP_HOST='127.0.0.1').get('/healthz'); print(r.status_code, r.content.decode())")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    status, body = done.stdout.strip().splitlines()[-1].split(" ", 1)
    assert status == "503"
    assert re.search(r'"database": "error: [^"]+"', body), body
