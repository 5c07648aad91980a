"""A whole network on one machine: the site under gunicorn (a database of its own on the test
PostgreSQL server), three
`tokvera target` upstreams of different speeds, three `tokvera host-agent` processes, jobs
submitted over HTTP; then the settled counts and each host's EWMAs, folded exactly once, and a
coordinator restart the agents live through. A fourth agent, whose upstream answers every
request with HTTP 500, fails its jobs with that reason and keeps running. All on 127.0.0.1."""

from __future__ import annotations

import os
import subprocess
import sys
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx
import psycopg
import pytest

from scans.grader.figures import ewma
from tests.conftest import free_port, scratch_database
from tests.helpers.processes import ROOT, gunicorn, running, wait_for

MODEL = "e2e-q4"
FLAKY_MODEL = "flaky-q4"  # served only by the agent whose upstream always fails
# name → (ttft_ms, itl_ms) of its upstream
SPEEDS = {"fast": (40, 2), "medium": (150, 6), "slow": (400, 15)}
TOKENS = 16


def _manage(env, *args) -> str:
    done = subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _process(args, env, name: str, logs: Path):
    return running(args, env, logs / f"{name}.log")


class Site:
    def __init__(self, env, port, logs):
        self.env, self.port, self.logs, self.runs = env, port, logs, 0

    @contextmanager
    def running(self):
        self.runs += 1
        # Threads, as in production: each agent's waiting lease holds one (docs/operations.md).
        # The same port each time: the agents call it again after the restart.
        with gunicorn(self.env, app="tests.benchmarks.site_for_e2e:application", threads=16,
                      port=self.port, log=self.logs / f"site-{self.runs}.log"):
            yield


def _rows(db: str, sql: str, *params):
    with psycopg.connect(db) as conn:
        return conn.execute(sql, params).fetchall()


def test_three_agents_serve_submitted_jobs_and_the_ewmas_add_up(tmp_path):
    db = scratch_database("e2e", migrated=True)  # as migrate and createcachetable make it
    env = {
        **os.environ,
        "DATABASE_URL": db,
        "CACHE_URL": "dbcache://tokvera_cache",
        "CELERY_BROKER_URL": "filesystem://",
        "SECRET_KEY": "e2e-" + "k" * 40,
        "DEBUG": "0",
    }
    _manage(env, "createteam", "ops", "--owner", "ops@example.test")
    _manage(env, "createteam", "buyers", "--owner", "buyer@example.test")
    buyer_token = _manage(env, "createtoken", "--team", "buyers", "--scope", "read-write").strip()
    _manage(env, "catalog", "add", MODEL, "--quant", "Q4_K_M", "--context-len", "2048")
    _manage(env, "catalog", "add", FLAKY_MODEL, "--quant", "Q4_K_M", "--context-len", "2048")
    host_tokens = {}
    for name in [*SPEEDS, "flaky"]:
        out = _manage(env, "createhost", name, "--team", "ops", "--trust", "software")
        assert out.count("\n") == 1 and out.startswith("tkh_")  # the token, alone on one line
        host_tokens[name] = out.strip()

    site = Site(env, free_port(), tmp_path)
    coordinator = f"http://127.0.0.1:{site.port}"
    buyer = httpx.Client(base_url=coordinator, headers={"Authorization": f"Bearer {buyer_token}"},
                         trust_env=False, timeout=30)

    def submit(n, model=MODEL):
        ids = []
        for i in range(n):
            response = buyer.post("/v1/jobs", json={
                "model": model, "max_tokens": TOKENS,
                "messages": [{"role": "user", "content": f"job {i}"}]})
            assert response.status_code == 202, response.text
            ids.append(response.json()["id"])
        return ids

    def all_settled(ids):
        states = [buyer.get(f"/v1/jobs/{job_id}").json() for job_id in ids]
        return states if all(s["settled_at"] for s in states) else None

    with ExitStack() as network:
        with site.running():
            for name, (ttft, itl) in SPEEDS.items():
                port = free_port()
                network.enter_context(_process(
                    [sys.executable, "-m", "tokvera_site.cli", "target", "--port", str(port),
                     "--ttft-ms", str(ttft), "--itl-ms", str(itl), "--tokens", str(TOKENS)],
                    env, f"target-{name}", tmp_path))
                network.enter_context(_process(
                    [sys.executable, "-m", "tokvera_site.cli", "host-agent",
                     "--coordinator", coordinator, "--token-env", "E2E_HOST_TOKEN",
                     "--upstream", f"http://127.0.0.1:{port}/v1", "--model", MODEL,
                     "--poll-s", "0.2", "--gpu-model", f"{name} GPU"],
                    {**env, "E2E_HOST_TOKEN": host_tokens[name]}, f"agent-{name}", tmp_path))
            flaky_port = free_port()
            network.enter_context(_process(
                [sys.executable, "-m", "tokvera_site.cli", "target", "--port", str(flaky_port),
                 "--error-rate", "1"], env, "target-flaky", tmp_path))
            flaky_agent = network.enter_context(_process(
                [sys.executable, "-m", "tokvera_site.cli", "host-agent",
                 "--coordinator", coordinator, "--token-env", "E2E_HOST_TOKEN",
                 "--upstream", f"http://127.0.0.1:{flaky_port}/v1", "--model", FLAKY_MODEL,
                 "--poll-s", "0.2"],
                {**env, "E2E_HOST_TOKEN": host_tokens["flaky"]}, "agent-flaky", tmp_path))
            wait_for(lambda: _rows(db, "SELECT count(*) FROM benchmarks_host "
                                        "WHERE last_heartbeat_at IS NOT NULL")[0][0] == 4,
                      30, "four hosts online")
            doomed = submit(3, FLAKY_MODEL)
            first = submit(24)
            states = wait_for(lambda: all_settled(first), 60, "the first jobs to settle", 0.3)
            assert {s["status"] for s in states} == {"completed"}
            assert all(s["result"]["content"] and s["completion_tokens"] == TOKENS for s in states)
            failed = wait_for(lambda: all_settled(doomed), 60, "the flaky jobs to settle", 0.3)
            assert [s["failure_reason"] for s in failed] == ["host: upstream answered HTTP 500"] * 3
            assert all(s["result"] is None for s in failed)

        # The coordinator goes away and comes back; the agents ride it out and serve again.
        with site.running():
            second = submit(6)
            states = wait_for(lambda: all_settled(second), 60, "the jobs after the restart", 0.3)
            assert {s["status"] for s in states} == {"completed"}
            wait_for(lambda: not _rows(db, "SELECT count(*) FROM benchmarks_job "
                                            "WHERE folded_at IS NULL")[0][0], 30, "the folds")
            assert flaky_agent.poll() is None  # upstream errors and a restart: still serving

    counts = dict(_rows(db, "SELECT status, count(*) FROM benchmarks_job GROUP BY status"))
    assert counts == {"completed": 30, "failed": 3}
    hosts = {name: (host_id, ttft, tps, rep, gpu) for host_id, name, ttft, tps, rep, gpu in _rows(
        db, "SELECT id, name, ttft_ewma_ms, tps_ewma, reputation, gpu_model FROM benchmarks_host")}
    served = 0
    flaky = hosts.pop("flaky")
    assert flaky[1] is None and flaky[2] is None  # failures give no TTFT or TPS sample
    assert flaky[3] == pytest.approx(0.5 * 0.9 ** 3)  # but each lowers reputation
    for name, (host_id, ttft, tps, reputation, gpu) in hosts.items():
        samples = _rows(db, "SELECT ttft_ms, completion_tokens, elapsed_ms FROM benchmarks_job "
                            "WHERE host_id = %s AND status = 'completed' ORDER BY settled_at, id",
                        host_id)
        served += len(samples)
        assert gpu == f"{name} GPU"
        # each completed job folded exactly once, in completion order
        by_hand_ttft, by_hand_tps = _fold_by_hand(samples)
        assert ttft == pytest.approx(by_hand_ttft) and tps == pytest.approx(by_hand_tps)
        assert reputation == pytest.approx(1 - 0.5 * 0.9 ** len(samples))
    assert served == 30
    assert all(hosts[name][1] is not None for name in SPEEDS)  # every agent served some
    assert hosts["fast"][1] < hosts["slow"][1]  # 40 ms vs 400 ms upstreams: routing saw it


def _fold_by_hand(samples):
    ttft = tps = None
    for ttft_ms, tokens, elapsed_ms in samples:
        if ttft_ms is not None:
            ttft = ewma(ttft, ttft_ms)
        if tokens and elapsed_ms:
            tps = ewma(tps, tokens / (elapsed_ms / 1000))
    return ttft, tps
