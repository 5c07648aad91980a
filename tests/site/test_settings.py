"""Settings come from the environment; a malformed value stops start-up with one clear line."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.helpers.paths import ROOT


def _start(**env_overrides) -> subprocess.CompletedProcess:
    # The test database's server stays; everything else falls back to its default.
    env = {k: v for k, v in os.environ.items() if k not in {
        "CELERY_BROKER_URL", "CACHE_URL", "DEBUG", "SECRET_KEY"}}
    env.update(env_overrides)
    code = "import django; django.setup(); from django.conf import settings; print(settings.DEBUG)"
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env={**env, "DJANGO_SETTINGS_MODULE":
                                                      "tokvera_site.settings"},
        capture_output=True, text=True, timeout=60,
    )


@pytest.mark.parametrize(
    ("variable", "value", "expects"),
    [
        ("DATABASE_URL", "mysql://root@localhost/x", "scheme is one of postgres"),
        ("DATABASE_URL", "sqlite:///var/tokvera.sqlite3",
         "SQLite is not supported; expected a postgres:// URL"),
        ("DATABASE_URL", "not a url", "scheme is one of"),
        ("CELERY_BROKER_URL", "kafka://localhost", "scheme is one of filesystem, redis"),
        ("CACHE_URL", "memcache://localhost", "scheme is one of"),
        ("DEBUG", "maybe", "true or false"),
        ("SECRET_KEY", "short", "at least 32 characters"),
        ("INVITE_MAX_AGE_HOURS", "three days", "a whole number"),
        ("SCAN_STREAMS_PER_WORKER", "0", "a whole number of at least 1"),
        ("SCAN_CONCURRENCY_PER_WORKER", "lots", "a whole number"),
        ("DB_POOL_MAX_SIZE", "lots", "a whole number of connections"),
        ("DB_POOL_MAX_SIZE", "-2", "0 or more connections"),
    ],
)
def test_malformed_setting_stops_startup_with_one_line_naming_it(variable, value, expects):
    result = _start(**{variable: value})
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("tokvera: configuration error:")
    assert variable in lines[0] and expects in lines[0]


def test_a_pool_and_persistent_connections_together_stop_startup():
    result = _start(DB_POOL_MAX_SIZE="8", DB_CONN_MAX_AGE="60")
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert "DB_CONN_MAX_AGE and DB_POOL_MAX_SIZE" in line


def test_a_pool_size_gives_django_a_pool_of_that_many_connections():
    code = ("from tokvera_site import config; c = config.database(); "
            "print(c['CONN_MAX_AGE'], c['OPTIONS']['pool'])")
    env = {**os.environ, "DB_POOL_MAX_SIZE": "8"}
    env.pop("DB_CONN_MAX_AGE", None)
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.stdout.strip() == "0 {'min_size': 1, 'max_size': 8, 'timeout': 5.0}", out.stderr


def test_debug_is_off_unless_turned_on():
    assert _start().stdout.strip() == "False"
    assert _start(DEBUG="1").stdout.strip() == "True"


def test_secret_key_is_generated_once_into_var_and_kept_private():
    _start()
    key_file = ROOT / "var" / "secret_key"
    first = key_file.read_text()
    _start()
    assert key_file.read_text() == first
    assert len(first) >= 50
    assert oct(key_file.stat().st_mode & 0o777) == "0o600"
    ignored = subprocess.run(["git", "check-ignore", "-q", str(key_file)], cwd=ROOT)
    assert ignored.returncode == 0, "var/secret_key must never be committed"


def test_postgres_url_selects_psycopg_backend():
    code = (
        "from tokvera_site import config; c = config.database(); "
        "print(c['ENGINE'], c['NAME'], c['HOST'], c['PORT'])"
    )
    env = {**os.environ, "DATABASE_URL": "postgres://postgres@127.0.0.1:5432/somedb"}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.stdout.split() == ["django.db.backends.postgresql", "somedb", "127.0.0.1", "5432"]


def test_without_database_url_and_no_embedded_server_the_site_says_how_to_start_one(tmp_path):
    result = _start(DATABASE_URL="", TOKVERA_VAR_DIR=str(tmp_path))
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert "embedded PostgreSQL" in line and "make run" in line and "DATABASE_URL" in line


def test_a_unix_socket_folder_in_the_url_reaches_psycopg_decoded():
    code = "from tokvera_site import config; print(config.database()['HOST'])"
    env = {**os.environ, "DATABASE_URL": "postgres://postgres@%2Fsrv%2Fpg%20run/tokvera"}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.stdout.strip() == "/srv/pg run"


def test_the_default_cache_is_shared_through_the_database():
    code = ("import django; django.setup(); from django.conf import settings; "
            "print(settings.CACHES['default']['BACKEND'])")
    out = _start()
    assert out.returncode == 0, out.stderr
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, env={**{k: v for k, v in os.environ.items() if k != "CACHE_URL"},
                                           "DJANGO_SETTINGS_MODULE": "tokvera_site.settings"})
    assert done.stdout.strip() == "django.core.cache.backends.db.DatabaseCache", done.stderr
