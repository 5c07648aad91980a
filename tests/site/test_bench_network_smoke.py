"""The network coordinator's benchmark (tests/perf/bench_network.py) still runs: at a toy size,
against a scratch database, with its defaults (the production shape of docs/operations.md), it
names the configuration it ran and says, for every phase, each component's CPU and whether the
client or the server limited the figure; the job hosts' calls reach the host-call server and
the buyer's the web server. Its figures are not checked here (a loaded test box says nothing
of them)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys

import pytest
from django.conf import settings

from tests.conftest import database_url, free_port, scratch_database
from tests.helpers.paths import ROOT

sys.path.insert(0, str(ROOT / "tests" / "perf"))

import bench_network  # noqa: E402

PHASES = ("floor_401", "heartbeats_max", "heartbeats_at_80pct_of_max",
          "pgbench_single_row_update", "jobs")


@pytest.fixture
def pgbench():
    if shutil.which("pgbench") is None:
        pytest.skip("needs PostgreSQL's pgbench on PATH")


@pytest.mark.redis
@pytest.mark.django_db
def test_benchmark_names_its_configuration_and_what_limited_each_phase(tmp_path, pgbench):
    database = scratch_database("bench_network", migrated=True).rsplit("/", 1)[1]
    cache = os.environ.get("CACHE_URL", "")
    env = {**os.environ, "BENCH_PG": database_url("x").rsplit("/", 1)[0], "BENCH_DB": database,
           "BENCH_BROKER_URL": settings.CELERY_BROKER_URL,
           "BENCH_CACHE_URL": cache if cache.startswith("redis") else settings.CELERY_BROKER_URL}
    out = tmp_path / "result.json"
    done = subprocess.run(
        [sys.executable, "tests/perf/bench_network.py", "--seconds", "2", "--hosts", "400",
         "--jobs-runs", "1", "--pgbench-scale", "1", "--migrated", "--port", str(free_port()),
         "--host-call-port", str(free_port()), "--json-out", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stderr[-3000:]

    result = json.loads(out.read_text())
    configuration = result["configuration"]
    assert configuration["production_shape"] is True
    assert configuration["differs_from_production"] == []
    assert set(bench_network.SHAPE) <= set(configuration["settings"])
    assert configuration["settings"]["pool"] == 16
    assert "configuration: the production shape of docs/operations.md." in done.stderr
    for name in PHASES:
        phase = result[name]
        assert set(phase["cpu"]["cpu_s"]) == set(bench_network.COMPONENTS), name
        assert set(phase["cpu"]["share_of_cpus"]) == set(bench_network.COMPONENTS), name
        assert 0 <= phase["cpu"]["idle_share"] <= 1
        assert phase["limited_by"] in ("client", "server"), name
        assert phase["busiest"] in bench_network.SERVER_COMPONENTS, name
    # Each component's CPU is its own: the server that answered each phase did the work.
    assert result["heartbeats_max"]["cpu"]["cpu_s"]["host_call_server"] > 0
    # The buyer's submissions went to gunicorn, the job hosts' calls to the host-call server,
    # and the web's CPU per job counts both.
    jobs = result["jobs"]
    assert jobs["cpu"]["cpu_s"]["gunicorn_workers"] > 0
    assert jobs["cpu"]["cpu_s"]["host_call_server"] > 0
    assert jobs["web_cpu_ms_per_job"] == pytest.approx(
        jobs["gunicorn_cpu_ms_per_job"] + jobs["host_call_server_cpu_ms_per_job"], abs=0.02)
    assert result["pgbench_single_row_update"]["cpu"]["cpu_s"]["postgresql"] > 0
    assert result["pgbench_single_row_update"]["updates_per_s"] > 0
    assert "heartbeats_to_pgbench_ratio" in result
    assert result["jobs"]["completed"] > 0
    assert result["stalled_phases"] == []


def test_a_call_the_server_never_answers_is_given_up_at_the_deadline():
    async def silent(reader, writer):
        await reader.read()  # reads the request and never answers

    async def call():
        server = await asyncio.start_server(silent, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        deadline = bench_network.Deadline(0, grace_s=0.3)
        async with server:
            status, _ = await bench_network.Http(port, deadline).call(
                "POST", "/v1/hosts/heartbeat", "tkh_x", b"{}")
        return status, deadline.cut_off

    assert asyncio.run(call()) == (0, 1)


def test_every_line_it_prints_fits_80_columns():
    parser = bench_network.build_parser()
    args = parser.parse_args(["--pool", "8", "--submit-batch", "1", "--no-complete-batch",
                              "--complete-wait-s", "25", "--waiting-per-process", "230"])
    configuration = bench_network.describe(args, parser)
    assert configuration["production_shape"] is False
    assert configuration["differs_from_production"] == [
        "pool", "waiting_per_process", "complete_batch", "complete_wait_s", "submit_batch"]
    cpu = {"seconds": 20.0, "cpu_s": dict.fromkeys(bench_network.COMPONENTS, 12.3),
           "share_of_cpus": dict.fromkeys(bench_network.COMPONENTS, 0.123),
           "idle_share": 0.015, "steal_share": 0.012}
    phase = {"per_s": 12345.6, "p50_ms": 1234.5, "p99_ms": 12345.6, "target_rate": 12345.6,
             "statuses": {200: 1}, "cpu": cpu, "limited_by": "client",
             "load_generator_cores": 0.95, "busiest": "host_call_server", "stalled": True,
             "cut_off_at_deadline": 123456, "server_cpu_ms_per_heartbeat": 0.123}
    result = {
        "configuration": configuration, "floor_401": phase, "heartbeats_max": phase,
        "heartbeats_at_1000_per_s": phase, "heartbeats_at_80pct_of_max": phase,
        "pgbench_single_row_update": {**phase, "updates_per_s": 123456.7},
        "heartbeats_to_pgbench_ratio": 0.123,
        "jobs": {**phase, "completed_per_s": 1234.5, "completed": 123456,
                 "http_calls_per_job": 1.23, "web_cpu_ms_per_job": 12.34,
                 "gunicorn_cpu_ms_per_job": 12.34, "host_call_server_cpu_ms_per_job": 12.34,
                 "celery_cpu_ms_per_job": 1.23},
        "fold_latency": {"p99_ms": 12345.6, "within_5s_share": 0.9876},
        "celery_rss_mb_before_jobs": [134.7, 134.8],
        "celery_rss_mb_after_second_jobs_run": [136.6, 137.2],
        "rss_mb_warm": [124.6, 124.7], "rss_mb_after_second_jobs_run": [137.0, 137.0],
        "load_average_1_5_15": [12.76, 4.53, 2.74],
    }
    lines = [*bench_network.summary_lines(result),
             *bench_network.phase_lines("heartbeats at 80 % of the most", phase),
             *parser.format_help().splitlines()]
    assert "ratio at least 0.123" in " ".join(" ".join(lines).split())
    assert [line for line in lines if len(line) > 80] == []
