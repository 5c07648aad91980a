"""Outages degrade, never corrupt. Each test starts the service it breaks (an embedded Redis
broker, an embedded PostgreSQL under tmp_path) and stops only that one:

- with the broker down, scan-now on the API and on the page answers 503 with Retry-After, keeps
  no queued scan and spends no cooldown;
- with PostgreSQL stopped while a scan measures, the worker keeps the finished report and stores
  it when the database returns."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import httpx
import psycopg

from tests.conftest import free_port, scratch_database
from tests.helpers import workers
from tests.helpers.paths import ROOT
from tests.helpers.processes import gunicorn, running, wait_for
from tokvera_site.devservices import EmbeddedPostgres, EmbeddedRedis

OWNER, PASSWORD = "ana@example.test", "correct horse battery staple"


def _manage(env, *args) -> str:
    done = subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def _rows(database_url: str, sql: str, *params):
    with psycopg.connect(database_url) as conn:
        return conn.execute(sql, params).fetchall()


def _site_env(database_url: str, broker_url: str, **extra) -> dict:
    return {**os.environ, "DATABASE_URL": database_url, "CELERY_BROKER_URL": broker_url,
            "CACHE_URL": "dbcache://tokvera_cache", "SECRET_KEY": "outages-" + "k" * 40,
            "DEBUG": "0", "OUTBOUND_ALLOW": "loopback", **extra}


def _prepare_site(env, migrated: bool = False) -> None:
    if not migrated:
        _manage(env, "migrate", "--noinput", "-v", "0")
        _manage(env, "createcachetable")
    _manage(env, "createteam", "acme", "--owner", OWNER)


def test_scan_now_with_the_broker_down_answers_503_and_saves_nothing(tmp_path):
    database = scratch_database("broker_down", migrated=True)
    with EmbeddedRedis() as broker:
        env = _site_env(database, broker.url(0))
        _prepare_site(env, migrated=True)
        token = _manage(env, "createtoken", "--team", "acme", "--scope", "read-write").strip()
        _manage(env, "shell", "-c", "from django.contrib.auth import get_user_model; "
                f"u = get_user_model().objects.get(email='{OWNER}'); "
                f"u.set_password('{PASSWORD}'); u.save()")
        with gunicorn(env, log=tmp_path / "site.log") as site:
            api = httpx.Client(base_url=site, headers={"Authorization": f"Bearer {token}"},
                               trust_env=False, timeout=30)
            created = api.post("/api/v1/endpoints/", json={
                "name": "prod llama", "base_url": "http://127.0.0.1:9/v1", "model": "tiny",
                "levels": [1]})
            assert created.status_code == 201, created.text
            endpoint_id = created.json()["id"]
            browser = _logged_in(site)

            broker.stop()
            by_api = api.post(f"/api/v1/endpoints/{endpoint_id}/scans/")
            page = browser.get(f"/endpoints/{endpoint_id}/")
            by_page = browser.post(f"/endpoints/{endpoint_id}/scan", data={
                "csrfmiddlewaretoken": _csrf(page.text)})

            assert by_api.status_code == 503, by_api.text
            assert int(by_api.headers["Retry-After"]) > 0
            assert "task queue is unreachable" in by_api.json()["detail"]
            assert by_page.status_code == 503
            assert int(by_page.headers["Retry-After"]) > 0
            assert "task queue is unreachable" in by_page.text
            assert _rows(database, "SELECT count(*) FROM scans_scan") == [(0,)]
            assert _rows(database, "SELECT last_manual_scan_at FROM scans_endpoint") == [(None,)]

            broker.start()  # back on the same port: the cooldown was not spent
            retried = api.post(f"/api/v1/endpoints/{endpoint_id}/scans/")
            assert retried.status_code == 202, retried.text


def _logged_in(site: str) -> httpx.Client:
    browser = httpx.Client(base_url=site, trust_env=False, timeout=30)
    login = browser.get("/login/")
    answer = browser.post("/login/", data={"login": OWNER, "password": PASSWORD,
                                           "csrfmiddlewaretoken": _csrf(login.text)})
    assert answer.status_code == 302, answer.text[-2000:]
    return browser


def _csrf(html: str) -> str:
    return re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', html)[1]


def test_a_scan_finished_while_postgres_is_down_is_stored_when_it_returns(tmp_path):
    target_port = free_port()
    with EmbeddedRedis() as broker:
        postgres = EmbeddedPostgres(tmp_path / "pg").start()
        try:
            postgres.create_database("tokvera")
            database = postgres.url("tokvera")
            env = _site_env(database, broker.url(0),
                            DJANGO_SETTINGS_MODULE="tests.helpers.fast_scan_settings")
            _prepare_site(env)
            scan_id = int(_manage(env, "shell", "-c", (
                "from accounts import teams; from scans.models import Scan; "
                "from scans.running import dispatch; "
                "from tests.helpers.factories import make_endpoint; "
                f"team = teams.Team.dangerously_unscoped.get(slug='acme'); "
                f"e = make_endpoint(team, base_url='http://127.0.0.1:{target_port}/v1', "
                "levels=[1], requests_per_level=1, timeout_s=30); "
                "s = Scan.dangerously_unscoped.create(endpoint=e, trigger='manual'); "
                "dispatch.send(s.pk); print(s.pk)")).split()[-1])
            worker_log = tmp_path / "worker.log"
            with running([sys.executable, "-m", "tokvera_site.cli", "target", "--port",
                           str(target_port), "--ttft-ms", "3000", "--itl-ms", "1", "--tokens", "4"],
                          env, tmp_path / "target.log"):
                worker = workers.start("--pool", "solo", env=env, log=worker_log)
                try:
                    status = "SELECT status FROM scans_scan WHERE id = %s"
                    wait_for(lambda: _rows(database, status, scan_id) == [("running",)], 90,
                              "the scan to run")
                    postgres.stop()  # while the target is still answering (3 s to the first token)
                    wait_for(lambda: "the database is unreachable" in worker_log.read_text(), 90,
                              "the finished scan to find the database gone")
                    postgres.start()
                    wait_for(lambda: _rows(database, status, scan_id)[0][0] != "running", 120,
                              "the scan to be stored")
                finally:
                    workers.stop(worker)
            [(state, reason, grade)] = _rows(
                database, "SELECT status, error_reason, grade FROM scans_scan WHERE id = %s", scan_id)
            assert state == "succeeded", reason
            assert grade  # the report measured before the outage, graded and stored
            assert _rows(database, "SELECT count(*) > 0 FROM scans_checkresult WHERE scan_id = %s",
                         scan_id) == [(True,)]
            assert _rows(database, "SELECT count(*) FROM scans_originlock") == [(0,)]
        finally:
            postgres.stop()
