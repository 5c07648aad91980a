"""The database stops while the site runs (a PostgreSQL the test starts itself, never the
machine's): /healthz answers 503 naming the database, the public pages keep serving the copy the
web process already has, and everything answers normally once the database is back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.conftest import free_port
from tokvera_site.devservices import EmbeddedPostgres

ROOT = Path(__file__).resolve().parents[2]
PUBLIC = ("/benchmarks", "/v1/slo", "/v1/stats")


def _manage(env, *args):
    done = subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


def _get(port: int, path: str) -> httpx.Response:
    return httpx.get(f"http://127.0.0.1:{port}{path}", timeout=30, trust_env=False)


def _wait_until_up(port: int, proc: subprocess.Popen) -> None:
    for _ in range(300):
        assert proc.poll() is None, "the site exited"
        try:
            _get(port, "/healthz")
            return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise AssertionError("the site did not start")


def test_with_the_database_down_public_pages_serve_their_copy_and_healthz_says_why(tmp_path):
    postgres = EmbeddedPostgres(tmp_path / "pg").start()
    try:
        postgres.create_database()
        env = {**os.environ, "DATABASE_URL": postgres.url(), "CACHE_URL": "dbcache://tokvera_cache",
               "CELERY_BROKER_URL": "filesystem://", "TOKVERA_VAR_DIR": str(tmp_path / "var"),
               "DEBUG": "0", "DB_CONN_MAX_AGE": "0"}
        _manage(env, "migrate", "--noinput", "-v", "0")
        _manage(env, "createcachetable")
        port = free_port()
        site = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "tokvera_site.wsgi", "--bind", f"127.0.0.1:{port}",
             "--workers", "1", "--timeout", "60"],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            _wait_until_up(port, site)
            before = {path: _get(port, path) for path in PUBLIC}
            assert {r.status_code for r in before.values()} == {200}
            assert json.loads(_get(port, "/healthz").text)["database"] == "ok"

            postgres.stop()

            health = _get(port, "/healthz")
            assert health.status_code == 503
            assert json.loads(health.text)["database"].startswith("error"), health.text
            for path, earlier in before.items():
                during = _get(port, path)
                assert during.status_code == 200, (path, during.status_code)
                assert during.content == earlier.content, path

            postgres.start()
            assert _get(port, "/healthz").status_code in {200, 503}  # the broker may be absent
            assert json.loads(_get(port, "/healthz").text)["database"] == "ok"
        finally:
            site.terminate()
            site.wait(timeout=30)
    finally:
        postgres.stop()
