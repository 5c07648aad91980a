"""A cache outage: the public figures and the host calls keep answering (never a 500).

Each test runs its own Redis (tokvera_site.devservices.EmbeddedRedis) as the site's cache and
stops that one mid-test; the machine's shared Redis is never touched."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
import time_machine
from django.test import Client

from accounts import teams
from benchmarks.models import Host, JobStatus
from benchmarks.network import hosts
from tests.conftest import bearer, make_user
from tests.helpers.network import T0, make_catalog, make_host, make_job
from tokvera_site.devservices import EmbeddedRedis

pytestmark = pytest.mark.django_db
URLS = ("/v1/slo", "/v1/stats", "/benchmarks")


@pytest.fixture
def own_redis(settings):
    with EmbeddedRedis() as server:
        settings.CACHES = {"default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": server.url(0),
            "KEY_PREFIX": f"outage-{uuid.uuid4().hex[:12]}",
        }}
        yield server


@pytest.fixture
def network(db):
    ops = teams.create_team("outage-ops", "Outage Ops", owner=make_user("outage-ops"))
    other = teams.create_team("outage-other", "Outage Other", owner=make_user("outage-other"))
    make_catalog("alpha-q4", context_len=8192)
    make_host(ops, "ops-1", "edr", models=["alpha-q4"], ttft=100.0, tps=10.0, gpu="RTX 4090")
    make_host(other, "other-1", "edr", models=["alpha-q4"], ttft=300.0, tps=30.0, gpu="RTX 4090")
    make_job(ops, "alpha-q4", latency_ms=400)
    host, token = hosts.create_host(ops, "agent-box", "software")
    return ops, host, token


def _get_all(client) -> dict[str, bytes]:
    answers = {url: client.get(url) for url in URLS}
    assert {url: a.status_code for url, a in answers.items()} == dict.fromkeys(URLS, 200)
    return {url: a.content for url, a in answers.items()}


def test_with_the_cache_stopped_the_public_figures_and_heartbeats_keep_working(own_redis, network):
    ops, host, token = network
    client = Client()
    with time_machine.travel(T0, tick=False) as clock:
        before = _get_all(client)
        own_redis.stop()

        # The last snapshot is served, the same bytes.
        assert _get_all(client) == before
        # Heartbeats are recorded in the database (the rate limit fails open); leases answer.
        answer = client.post("/v1/hosts/heartbeat", {"models": ["alpha-q4"]},
                             content_type="application/json", **bearer(token))
        assert answer.status_code == 200 and answer.json()["online"] is True
        host.refresh_from_db()
        assert host.last_heartbeat_at == T0
        assert client.post("/v1/hosts/lease", **bearer(token)).status_code == 204

        # Once the copy is too old it is rebuilt from the database, still without the cache.
        make_job(ops, "alpha-q4", JobStatus.FAILED, now=T0)
        clock.shift(timedelta(seconds=20))
        week = client.get("/v1/slo").json()["models"][0]["windows"]["7d"]
        assert (week["completed"], week["failed"]) == (1, 1)
        assert client.get("/v1/stats").json()["online_hosts"] == 3
    assert Host.dangerously_unscoped.filter(pk=host.pk, last_heartbeat_at=T0).exists()


def test_with_the_cache_down_before_any_request_the_figures_come_from_the_database(own_redis, network):
    own_redis.stop()
    with time_machine.travel(T0, tick=False):
        client = Client()
        answers = _get_all(client)
        assert b'"online_hosts": 2' in answers["/v1/stats"]
        assert b'data-model-id="alpha-q4"' in answers["/benchmarks"]


@pytest.mark.django_db(transaction=True)  # autocommit, as the site runs: a failed query poisons nothing
def test_a_database_cache_that_fails_falls_back_the_same_way(settings, network):
    # The default cache is the database's; here its table is missing, so every cache call fails
    # with the database error an outage of that cache raises.
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.db.DatabaseCache",
                                   "LOCATION": "no_such_cache_table"}}
    _, host, token = network
    with time_machine.travel(T0, tick=False):
        client = Client()
        answers = _get_all(client)
        assert b'"online_hosts": 2' in answers["/v1/stats"]
        answer = client.post("/v1/hosts/heartbeat", {"models": ["alpha-q4"]},
                             content_type="application/json", **bearer(token))
        assert answer.status_code == 200
