"""The snapshot's percentiles come from PostgreSQL's percentile_disc; they must equal the
project's one nearest-rank rule (scans.grader.figures.percentile) on the same cases: completion latencies
from jobs and TTFT / TPS from host EWMAs."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest

from accounts import teams
from benchmarks.public import snapshot
from scans.grader.figures import percentile
from tests.conftest import make_user
from tests.helpers.network import T0, make_catalog, make_host, make_job

pytestmark = pytest.mark.django_db

_rng = random.Random(6)
CASES = {
    "two": [100, 300],
    "one": [250],
    "twenty": list(range(1, 21)),  # p95 is exactly rank 19
    "twenty-one": list(range(1, 22)),
    "ties": [5, 5, 5, 9, 9, 1, 1],
    "unsorted": [900, 10, 450, 30, 30, 7000, 1],
    "hundred-random": [_rng.randint(1, 5000) for _ in range(100)],
    "odd-random": [_rng.randint(1, 90000) for _ in range(37)],
}


@pytest.fixture
def teams_():
    return (teams.create_team("perc-ops", "Perc Ops", owner=make_user("perc-ops")),
            teams.create_team("perc-buyer", "Perc Buyer", owner=make_user("perc-buyer")))


def test_two_samples_100_and_300_give_p50_100_and_p95_300(teams_):
    operator, buyer = teams_
    make_catalog("m", context_len=8192)
    for ms, team in ((300, operator), (100, buyer)):  # two operators: the cell is published
        make_job(buyer, "m", latency_ms=ms)
        make_host(team, f"h{ms}", "edr", models=["m"], ttft=float(ms), tps=float(ms))

    model = snapshot.build_snapshot(T0)["models"][0]

    assert model["windows"]["7d"]["latency"] == {"p50_ms": 100, "p95_ms": 300}
    edr = next(t for t in model["tiers"] if t["tier"] == "edr")
    assert (edr["ttft_p50_ms"], edr["ttft_p95_ms"], edr["tps_p50"]) == (100, 300, 100.0)


def test_both_paths_pick_the_nearest_rank_sample_on_every_case(teams_):
    operator, buyer = teams_
    for name, samples in CASES.items():
        make_catalog(name, context_len=8192)
        for i, value in enumerate(samples):
            make_job(buyer, name, latency_ms=value, settled_ago=timedelta(hours=i + 1))
            make_host((operator, buyer)[i % 2], f"{name}-{i}", "software", models=[name],
                      ttft=float(value), tps=value / 10)

    built = {m["id"]: m for m in snapshot.build_snapshot(T0)["models"]}

    for name, samples in CASES.items():
        latency = built[name]["windows"]["7d"]["latency"]
        assert latency == {"p50_ms": percentile(samples, 50), "p95_ms": percentile(samples, 95)}, name
        software = built[name]["tiers"][1]
        assert software["hosts"] == len(samples)
        if len(samples) < snapshot.MIN_HOSTS_PER_CELL:  # one host's own figure: never published
            assert (software["ttft_p50_ms"], software["tps_p50"]) == (None, None), name
            continue
        assert software["ttft_p50_ms"] == percentile(samples, 50), name
        assert software["ttft_p95_ms"] == percentile(samples, 95), name
        assert software["tps_p50"] == snapshot.half_up(percentile(samples, 50) / 10, 1), name


def test_latency_is_rounded_to_whole_milliseconds_half_up(teams_):
    _, buyer = teams_
    make_catalog("m", context_len=8192)
    make_job(buyer, "m", latency_ms=811.5)
    make_job(buyer, "m", latency_ms=812.4, settled_ago=timedelta(hours=2))

    latency = snapshot.build_snapshot(T0)["models"][0]["windows"]["7d"]["latency"]

    assert latency == {"p50_ms": 812, "p95_ms": 812}


def test_a_latency_of_days_keeps_its_microseconds(teams_):
    _, buyer = teams_
    make_catalog("m", context_len=8192)
    make_job(buyer, "m", latency_ms=3 * 86_400_000 + 0.5)  # three days and 500 µs: rounds up
    make_job(buyer, "m", latency_ms=3 * 86_400_000 + 0.499, settled_ago=timedelta(hours=2))

    latency = snapshot.build_snapshot(T0)["models"][0]["windows"]["7d"]["latency"]

    assert latency == {"p50_ms": 3 * 86_400_000, "p95_ms": 3 * 86_400_000 + 1}


def test_hosts_without_an_ewma_count_as_hosts_but_give_no_sample(teams_):
    operator, other = teams_
    make_catalog("m", context_len=8192)
    make_host(operator, "new", "none", models=["m"])
    make_host(operator, "ttft-only", "none", models=["m"], ttft=250.0)
    make_host(other, "other-ttft-only", "none", models=["m"], ttft=350.0)

    none = snapshot.build_snapshot(T0)["models"][0]["tiers"][0]

    assert none == {"tier": "none", "hosts": 3, "ttft_p50_ms": 250, "ttft_p95_ms": 350, "tps_p50": None}


def test_postgresql_has_the_covering_index_the_job_windows_query_reads(db):
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'job_public_windows_idx'")
        (definition,) = cursor.fetchone()
    assert ("(model_id, settled_at) INCLUDE (status, created_at, completed_at, failure_reason)"
            in definition)
    assert "WHERE (settled_at IS NOT NULL)" in definition
