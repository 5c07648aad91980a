"""Heartbeats under gunicorn are answered in front of Django's middleware
(benchmarks/network/host_wsgi.py): the same answers as the Django view for every case, the host
recorded, a dropped database connection survived, everything else still served by Django."""

from __future__ import annotations

import socket
from contextlib import contextmanager

import httpx
import psycopg
import pytest
from django.db import connection
from prometheus_client.parser import text_string_to_metric_families

from accounts import teams
from benchmarks.models import Host
from benchmarks.network import hosts
from tests.conftest import database_url, make_user
from tests.helpers.network import assert_heartbeats_answered_as_the_view, make_catalog
from tests.helpers.processes import gunicorn
from tests.helpers.workers import worker_env

pytestmark = [pytest.mark.django_db(transaction=True)]


@contextmanager
def _gunicorn():
    with gunicorn(worker_env(DEBUG="0", ALLOWED_HOSTS="127.0.0.1")) as url, \
            httpx.Client(base_url=url, timeout=30) as client:
        yield client


@pytest.fixture
def operator_host():
    make_catalog("tiny-q4")
    team = teams.create_team("ops", "Ops", owner=make_user("ops-owner"))
    host, token = hosts.create_host(team, "rig-1", "software")
    return host, token


def test_gunicorn_answers_every_heartbeat_case_exactly_as_the_django_view(operator_host):
    host, token = operator_host
    gone, revoked = hosts.create_host(host.team, "rig-2")
    hosts.revoke_token(gone)
    with _gunicorn() as web:
        assert_heartbeats_answered_as_the_view(web, token, revoked)
    host.refresh_from_db()
    assert host.is_online() and host.slots == 2 and host.gpu_model == "RTX 4090"
    assert host.advertised == ["tiny-q4"]


def test_a_heartbeat_after_the_database_dropped_the_connection_is_still_recorded(operator_host):
    host, token = operator_host
    beat = b'{"models": ["tiny-q4"], "slots": 1}'
    auth = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    with _gunicorn() as web:
        assert web.post("/v1/hosts/heartbeat", content=beat, headers=auth).status_code == 200
        first = Host.dangerously_unscoped.get(pk=host.pk).last_heartbeat_at
        # The server ends every other session on this database (gunicorn's kept connection).
        with psycopg.connect(database_url(), autocommit=True) as admin:
            ended = admin.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                "AND pid <> %s", [connection.connection.info.backend_pid]).fetchone()[0]
        assert ended >= 1
        again = web.post("/v1/hosts/heartbeat", content=beat, headers=auth)
        assert again.status_code == 200, again.text
        assert Host.dangerously_unscoped.get(pk=host.pk).last_heartbeat_at > first


def test_body_limits_and_everything_else_stay_with_django(operator_host):
    _, token = operator_host
    auth = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    with _gunicorn() as web:
        # A body declared over the heartbeat's 64 KiB is refused without being read.
        with socket.create_connection((web.base_url.host, web.base_url.port), timeout=30) as raw:
            raw.sendall(f"POST /v1/hosts/heartbeat HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                        f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
                        f"Content-Length: {17 * 2**20}\r\nConnection: close\r\n\r\n{{}}".encode())
            raw.shutdown(socket.SHUT_WR)
            answer = b""
            while chunk := raw.recv(65536):  # to the end: the head and body may come apart
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 400") and b"at most 65536 bytes" in answer
        assert web.get("/v1/hosts/heartbeat").status_code == 405  # Django's require_POST
        assert web.get("/healthz").status_code == 200
        for _ in range(3):
            assert web.post("/v1/hosts/heartbeat", headers=auth,
                            content=b'{"models": ["tiny-q4"]}').status_code == 200
        counted = {
            sample.labels["status"]: sample.value
            for family in text_string_to_metric_families(web.get("/metrics").text)
            if family.name == "tokvera_host_heartbeats" for sample in family.samples
            if sample.name.endswith("_total")
        }
        assert counted.get("200", 0) >= 3 and counted.get("400", 0) >= 1


def test_under_gunicorn_a_hosts_lease_and_completion_are_answered_in_front_of_django(net):
    _, token = net.host("h1")
    job_id = net.submit_id()  # assigned here (eager Celery), leased through gunicorn
    auth = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    with _gunicorn() as web:
        leased = web.post("/v1/hosts/lease", headers=auth, content=b'{"start": true}')
        assert leased.status_code == 200 and leased.json()["id"] == job_id
        done = web.post(f"/v1/jobs/{job_id}/complete", headers=auth, content=(
            b'{"ttft_ms": 80, "completion_tokens": 5, "elapsed_ms": 400, "lease_next": true}'))
        assert done.status_code == 200 and done.json()["next"] is None
        counted = {
            (sample.labels["call"], sample.labels["status"]): sample.value
            for family in text_string_to_metric_families(web.get("/metrics").text)
            if family.name == "tokvera_host_job_calls" for sample in family.samples
            if sample.name.endswith("_total")
        }
    assert counted == {("lease", "200"): 1, ("complete", "200"): 1}
    assert net.job(job_id).status == "completed"
