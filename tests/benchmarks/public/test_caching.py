"""Live JSON (reused for at most 15 s), the page from a snapshot kept 300 s and rebuilt by the
periodic task or `manage.py refresh_benchmarks`, and what a cached answer costs (no query)."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta
from io import StringIO

import pytest
import time_machine
from django.core.cache import cache
from django.core.management import call_command
from django.test import Client

from accounts import teams
from benchmarks import tasks
from benchmarks.public import cache as public_cache
from common import stale_cache
from common.periodic_tasks import all_periodic_tasks
from tests.conftest import make_user
from tests.helpers.network import T0, make_catalog, make_host, make_job
from tests.helpers.processes import ROOT

pytestmark = pytest.mark.django_db


@pytest.fixture
def small(db):
    operator = teams.create_team("cache-ops", "Cache Ops", owner=make_user("cache-ops"))
    buyer = teams.create_team("cache-buyer", "Cache Buyer", owner=make_user("cache-buyer"))
    make_catalog("alpha-q4", context_len=8192)
    make_job(buyer, "alpha-q4", latency_ms=400)
    make_host(operator, "first", "none", models=["alpha-q4"], ttft=100.0, tps=10.0)
    return operator, buyer


def _hosts_on_page(client) -> str:
    html = client.get("/benchmarks").content.decode()
    return html.split('data-online-hosts="', 2)[1].split('"', 1)[0]


def _generated_at(client) -> str:
    html = client.get("/benchmarks").content.decode()
    return html.split('data-generated-at="', 1)[1].split('"', 1)[0]


def test_a_cached_page_or_json_answer_makes_no_database_query(small, django_assert_num_queries):
    client = Client()
    with time_machine.travel(T0, tick=False):
        for url in ("/benchmarks", "/v1/slo", "/v1/stats"):
            client.get(url)
        with django_assert_num_queries(0):
            for url in ("/benchmarks", "/v1/slo", "/v1/stats", "/benchmarks/methodology"):
                assert client.get(url).status_code == 200


def test_the_page_keeps_its_snapshot_until_the_task_rebuilds_it(small):
    operator, _ = small
    client = Client()
    with time_machine.travel(T0, tick=False) as clock:
        assert _hosts_on_page(client) == "1"
        make_host(operator, "second", "none", models=["alpha-q4"])
        clock.shift(timedelta(seconds=20))
        assert _hosts_on_page(client) == "1"  # the page's snapshot: up to 300 s old
        assert client.get("/v1/stats").json()["online_hosts"] == 2  # live: at most 15 s old
        tasks.refresh_public_benchmarks.apply()
        assert _hosts_on_page(client) == "2"


def test_a_page_snapshot_older_than_300_seconds_is_never_served(small):
    client = Client()
    with time_machine.travel(T0, tick=False) as clock:
        assert _generated_at(client) == "2030-01-07T12:00:00Z"
        clock.shift(timedelta(seconds=300))
        assert _generated_at(client) == "2030-01-07T12:00:00Z"
        clock.shift(timedelta(seconds=1))
        assert _generated_at(client) == "2030-01-07T12:05:01Z"


def test_the_json_is_reused_for_15_seconds_at_most(small):
    operator, _ = small
    client = Client()
    with time_machine.travel(T0, tick=False) as clock:
        first = client.get("/v1/slo").json()
        make_host(operator, "second", "none", models=["alpha-q4"], now=T0 + timedelta(seconds=16))
        clock.shift(timedelta(seconds=15))
        assert client.get("/v1/slo").json() == first
        clock.shift(timedelta(seconds=1))
        again = client.get("/v1/slo").json()
        assert again["models"][0]["online_hosts"] == 2
        assert again["generated_at"] == "2030-01-07T12:00:16Z"


def test_refresh_benchmarks_rebuilds_the_snapshot_at_once(small):
    operator, _ = small
    client = Client()
    with time_machine.travel(T0, tick=False):
        assert _hosts_on_page(client) == "1"
        make_host(operator, "second", "none", models=["alpha-q4"])
        out = StringIO()
        call_command("refresh_benchmarks", stdout=out)
        assert _hosts_on_page(client) == "2"
        assert client.get("/v1/slo").json()["models"][0]["online_hosts"] == 2
    assert out.getvalue().startswith(
        "Benchmarks snapshot rebuilt for 2030-01-07T12:00:00Z: 1 models, 2 hosts online (")


def test_the_periodic_rebuild_is_scheduled_before_the_snapshot_lapses():
    entry = [e for e in all_periodic_tasks() if e[1] == "benchmarks.tasks.refresh_public_benchmarks"]
    assert len(entry) == 1
    assert entry[0][2] == public_cache.REFRESH_EVERY_S < public_cache.PAGE_CACHE_S


def test_a_worker_knows_the_periodic_rebuild_task():
    """A worker imports the apps' task modules only; the rebuild task must be among them."""
    code = ("import django; django.setup(); from tokvera_site.celery import app; "
            "app.loader.import_default_modules(); "
            "print('benchmarks.tasks.refresh_public_benchmarks' in app.tasks)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          cwd=ROOT, env={**os.environ, "DJANGO_SETTINGS_MODULE": "tokvera_site.settings"})
    assert done.stdout.strip().splitlines()[-1:] == ["True"], done.stderr[-2000:]


def test_a_request_that_finds_another_building_takes_its_result(small, monkeypatch):
    """One builder at a time: a request that finds the build lock taken waits for the entry."""
    built = {}

    def sleep(_seconds):  # the other builder finishes while we wait
        if not built:
            built["entry"] = public_cache.build_page_entry(T0)
            cache.set(public_cache.PAGE_KEY, built["entry"], 300)

    with time_machine.travel(T0, tick=False):
        cache.add(f"{public_cache.PAGE_KEY}:lock", 1, 30)
        monkeypatch.setattr(stale_cache.time, "sleep", sleep)
        assert public_cache.page_entry() is not None
        assert cache.get(public_cache.PAGE_KEY)["html"] == built["entry"]["html"]


def test_a_request_builds_the_snapshot_itself_when_the_builder_never_finishes(small, monkeypatch):
    monkeypatch.setattr(stale_cache.time, "sleep", lambda _s: None)
    with time_machine.travel(T0, tick=False):
        cache.add(f"{public_cache.PAGE_KEY}:lock", 1, 30)
        response = Client().get("/benchmarks")
    assert response.status_code == 200
    assert b'data-model-id="alpha-q4"' in response.content
