"""Many waiting hosts on a few database connections: with `DB_POOL_MAX_SIZE` a web
process's threads share a pool of connections, and a waiting lease hands its connection back
between looks, so a process can hold far more waiting hosts than PostgreSQL has connections
for it. Real gunicorn (gthread), PostgreSQL and Redis; the jobs are submitted and assigned in
this process, and the pass's wake-up reaches gunicorn's waiting calls through Redis."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from django.db import connection

from tests.helpers.network import build_net, make_catalog
from tests.helpers.processes import gunicorn
from tests.helpers.workers import worker_env

pytestmark = [pytest.mark.django_db(transaction=True)]

WAITING_HOSTS = 10
POOL = 2


def _site_connections() -> int:
    """PostgreSQL connections to the test database other than this process's own."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                       "AND backend_type = 'client backend' AND pid <> pg_backend_pid()")
        return cursor.fetchone()[0]


def _heartbeat(base_url: str, token: str) -> int:
    return httpx.post(f"{base_url}/v1/hosts/heartbeat", json={"models": ["tiny-q4"], "slots": 1},
                      headers={"Authorization": f"Bearer {token}"}, trust_env=False,
                      timeout=30).status_code


class RemoteLease(threading.Thread):
    def __init__(self, base_url: str, token: str) -> None:
        super().__init__(daemon=True)
        self.base_url, self.token, self.answer = base_url, token, None

    def run(self) -> None:
        self.answer = httpx.post(f"{self.base_url}/v1/hosts/lease", json={"start": True, "wait_s": 30},
                                 headers={"Authorization": f"Bearer {self.token}"}, timeout=60,
                                 trust_env=False)


def test_ten_waiting_hosts_share_two_pooled_connections_and_all_get_their_jobs(tmp_path):
    make_catalog()
    net = build_net()
    tokens = [net.host(f"rig-{i}")[1] for i in range(WAITING_HOSTS)]
    env = worker_env(DEBUG="0", ALLOWED_HOSTS="127.0.0.1", DB_POOL_MAX_SIZE=str(POOL),
                     NETWORK_WAITING_LEASES_PER_PROCESS=str(WAITING_HOSTS + 2))
    with gunicorn(env, threads=16, log=tmp_path / "gunicorn.log") as base_url:
        waiting = [RemoteLease(base_url, token) for token in tokens]
        for call in waiting:
            call.start()
        # Other calls are still answered while every host waits, on the threads left (each
        # would keep a connection of its own without the pool) ...
        with ThreadPoolExecutor(max_workers=6) as callers:
            statuses = list(callers.map(lambda token: _heartbeat(base_url, token), tokens * 3))
        assert statuses == [200] * len(statuses)
        # ... and the site holds no more connections than the pool's.
        seen = [_site_connections() for _ in range(20)]
        assert max(seen) <= POOL, seen
        assert all(call.is_alive() for call in waiting), "a waiting lease answered before any job"

        job_ids = {net.submit_id() for _ in range(WAITING_HOSTS)}  # its pass announces the work
        for call in waiting:
            call.join(timeout=60)
        answers = [call.answer for call in waiting]

    assert [a.status_code for a in answers] == [200] * WAITING_HOSTS, [a.text for a in answers]
    assert {a.json()["id"] for a in answers} == job_ids  # each host got one of the jobs, running
    assert {a.json()["status"] for a in answers} == {"running"}
