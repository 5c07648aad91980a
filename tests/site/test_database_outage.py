"""The database stops while the site runs (a PostgreSQL the test starts itself, never the
machine's): /healthz answers 503 naming the database, the public pages keep serving the copy the
web process already has, the API, job submission and the heartbeat fast path answer 503 JSON
with Retry-After (never Django's HTML 500), and everything answers normally once the database
is back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import httpx

from tests.conftest import free_port
from tests.helpers.paths import ROOT
from tests.helpers.processes import gunicorn
from tokvera_site.devservices import EmbeddedPostgres

PUBLIC = ("/benchmarks", "/v1/slo", "/v1/stats")


def _manage(env, *args) -> str:
    done = subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


def _call(port: int, method: str, path: str, token: str, body: dict | None = None):
    return httpx.request(method, f"http://127.0.0.1:{port}{path}", json=body, timeout=30,
                         headers={"Authorization": f"Bearer {token}"}, trust_env=False)


def _api_calls(port: int, team_token: str, host_token: str) -> dict[str, httpx.Response]:
    return {
        "endpoints": _call(port, "GET", "/api/v1/endpoints/", team_token),
        "submit": _call(port, "POST", "/v1/jobs", team_token,
                        {"model": "tiny-q4", "messages": [{"role": "user", "content": "hi"}]}),
        "heartbeat": _call(port, "POST", "/v1/hosts/heartbeat", host_token,
                           {"models": ["tiny-q4"], "slots": 1}),
    }


def _get(port: int, path: str) -> httpx.Response:
    return httpx.get(f"http://127.0.0.1:{port}{path}", timeout=30, trust_env=False)


def _wait_until_up(port: int) -> None:
    """Until the site answers /healthz."""
    for _ in range(300):
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
        _manage(env, "createteam", "outage", "--owner", "owner@example.test")
        team_token = _manage(env, "createtoken", "--team", "outage", "--scope", "read-write")
        host_token = _manage(env, "createhost", "rig-1", "--team", "outage")
        port = free_port()
        with gunicorn(env, port=port, log=tmp_path / "gunicorn.log"):
            _wait_until_up(port)
            before = {path: _get(port, path) for path in PUBLIC}
            assert {r.status_code for r in before.values()} == {200}
            assert json.loads(_get(port, "/healthz").text)["database"] == "ok"

            assert _api_calls(port, team_token, host_token)["endpoints"].status_code == 200

            postgres.stop()

            for name, answer in _api_calls(port, team_token, host_token).items():
                assert answer.status_code == 503, (name, answer.status_code, answer.text[:200])
                assert answer.headers["Content-Type"].startswith("application/json"), name
                assert answer.json()["code"] == "database_unavailable", name
                assert int(answer.headers["Retry-After"]) > 0, name
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
        postgres.stop()
