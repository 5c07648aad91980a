"""Nothing but aggregates leaves the public surfaces, and building them never reads a job's
request or result body."""

from __future__ import annotations

import json

import pytest
import time_machine
from django.core.cache import cache
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from benchmarks.public import cache as public_cache
from benchmarks.public import snapshot
from tests.helpers.network import T0

pytestmark = pytest.mark.django_db

URLS = ("/v1/slo", "/v1/stats", "/benchmarks", "/benchmarks/methodology")
# Every key the JSON may carry. A new key must be added here on purpose, after asking whether it
# could name a host, an account or a team.
JSON_KEYS = {"generated_at", "models", "id", "online_hosts", "windows", "7d", "30d", "completed",
             "failed", "success_rate", "latency", "p50_ms", "p95_ms", "no_host", "providers",
             "hardware", "gpu", "hosts"}
BODY_COLUMNS = ("request_json", "result_json")


def _outputs(client) -> dict[str, str]:
    with time_machine.travel(T0, tick=False):
        found = {url: client.get(url).content.decode() for url in URLS}
        found["cached page entry"] = repr(cache.get(public_cache.PAGE_KEY))
        found["cached live entry"] = repr(cache.get(public_cache.LIVE_KEY))
    return found


def _keys(value) -> set[str]:
    if isinstance(value, dict):
        return set(value) | {k for v in value.values() for k in _keys(v)}
    if isinstance(value, list):
        return {k for v in value for k in _keys(v)}
    return set()


def test_no_host_team_account_or_body_identifier_appears_in_any_output(network):
    identifiers = network.identifiers()
    assert len(identifiers) > 40  # hosts, teams, users, emails, tokens, jobs, bodies

    outputs = _outputs(Client())

    for where, text in outputs.items():
        leaked = [value for value in identifiers if value.lower() in text.lower()]
        assert not leaked, f"{where} shows {leaked}"


def test_the_json_carries_only_aggregate_keys(network):
    with time_machine.travel(T0, tick=False):
        for url in ("/v1/slo", "/v1/stats"):
            assert _keys(Client().get(url).json()) <= JSON_KEYS, url


def test_no_query_behind_any_surface_mentions_a_body_column(network):
    with time_machine.travel(T0, tick=False), CaptureQueriesContext(connection) as queries:
        for url in URLS:
            assert Client().get(url).status_code == 200
        public_cache.refresh()
        snapshot.build_snapshot(T0)

    job_queries = [q["sql"] for q in queries.captured_queries if "benchmarks_job" in q["sql"]]
    assert job_queries, "the snapshot reads the job table"
    for sql in (q["sql"] for q in queries.captured_queries):
        assert not any(column in sql for column in BODY_COLUMNS), sql
        assert "*" not in sql.split("FROM")[0].replace("count(*)", ""), sql


def test_the_cached_snapshot_is_plain_json_data(network):
    built = snapshot.build_snapshot(T0)
    assert json.loads(json.dumps(built)) == built


def test_a_gpu_name_only_one_host_reports_is_not_published(network):
    from tests.helpers.network import make_host

    make_host(network.operator, "lonely", models=("alpha-q4",),
              gpu="ursula-hosting's rig (ursula@example)")
    with time_machine.travel(T0, tick=False):
        snapshot_json = json.dumps(snapshot.build_snapshot(T0))
        stats = Client().get("/v1/stats").json()
    assert "ursula" not in snapshot_json
    assert {"gpu": "other", "hosts": 3} in stats["hardware"]
