"""The three surfaces agree for the same coordinator clock: on random networks, and on a network
driven through the coordinator's own API (heartbeat, submit, lease, start, complete, fold)."""

from __future__ import annotations

import json
import random
from datetime import timedelta

import pytest
import time_machine
from django.test import Client
from django.utils import timezone

from accounts import teams
from benchmarks.models import Host, JobStatus
from benchmarks.network import hosts
from tests.benchmarks.public.test_hand_built_network import Page
from tests.conftest import make_user
from tests.helpers.network import T0, make_catalog, make_host, make_job
from tokvera_site.celery import app

pytestmark = pytest.mark.django_db
MODELS = ("alpha-q4", "beta-q8", "gamma-f16")
STATUSES = [JobStatus.COMPLETED] * 6 + [JobStatus.FAILED] * 2 + [
    JobStatus.QUEUED, JobStatus.LEASED, JobStatus.RUNNING]


def random_network(seed: int) -> None:
    rng = random.Random(seed)
    operator = teams.create_team(f"ops-{seed}", "Ops", owner=make_user(f"ops-{seed}"))
    buyer = teams.create_team(f"buyer-{seed}", "Buyer", owner=make_user(f"buyer-{seed}"))
    for model_id in MODELS:
        make_catalog(model_id, active=rng.random() > 0.15)
    hosts = []
    for i in range(rng.randint(0, 25)):
        hosts.append(make_host(
            operator, f"h{i}", rng.choice(["none", "software", "edr"]),
            models=rng.sample(MODELS, rng.randint(0, len(MODELS))),
            seen_ago_s=rng.choice([None, rng.uniform(0, 90)]),
            ttft=rng.choice([None, rng.uniform(20, 3000)]), tps=rng.choice([None, rng.uniform(1, 200)]),
            gpu=rng.choice(["", "RTX 4090", "RTX 3090", "A100"]), suspended=rng.random() < 0.1))
    for _ in range(rng.randint(0, 120)):
        status = rng.choice(STATUSES)
        host = rng.choice(hosts) if hosts and status != JobStatus.QUEUED else None
        if host is None and status in (JobStatus.LEASED, JobStatus.RUNNING):
            continue
        make_job(buyer, rng.choice(MODELS), status, host=host,
                 settled_ago=timedelta(seconds=rng.uniform(-3600, 35 * 86400)),
                 latency_ms=rng.uniform(50, 20000), tokens=rng.choice([0, 10, 100]))


def assert_surfaces_agree(client: Client) -> dict:
    slo = client.get("/v1/slo").json()
    stats = client.get("/v1/stats").json()
    html = client.get("/benchmarks").content.decode()
    page = Page(html)

    assert slo["generated_at"] == stats["generated_at"] == page.root["data-generated-at"]
    assert [m["id"] for m in slo["models"]] == [m["id"] for m in stats["models"]] == list(page.cards)
    assert f'data-online-hosts="{stats["online_hosts"]}"' in html
    for model, provided in zip(slo["models"], stats["models"], strict=True):
        card = page.cards[model["id"]]
        assert model["online_hosts"] == provided["providers"] == int(card["attrs"]["data-online-hosts"])
        success = model["windows"]["7d"]["success_rate"]
        assert card["attrs"]["data-model-success-7d"] == ("" if success is None else json.dumps(success))
        for row in card["windows"]:
            window = model["windows"][row["attrs"]["data-window"]]
            assert int(row["attrs"]["data-completed"]) == window["completed"]
            assert int(row["attrs"]["data-failed"]) == window["failed"]
            for attr, value in (("data-success", window["success_rate"]),
                                ("data-latency-p50-ms", window["latency"]["p50_ms"]),
                                ("data-latency-p95-ms", window["latency"]["p95_ms"])):
                assert row["attrs"][attr] == ("" if value is None else json.dumps(value))
        tier_hosts = sum(int(row["attrs"]["data-hosts"]) for row in card["tiers"])
        assert tier_hosts == model["online_hosts"]
    assert sum(h["hosts"] for h in stats["hardware"]) == stats["online_hosts"]
    return slo


@pytest.mark.parametrize("seed", range(6))
def test_the_three_surfaces_agree_on_a_random_network_at_a_frozen_clock(seed):
    random_network(seed)
    with time_machine.travel(T0, tick=False):
        assert_surfaces_agree(Client())


def test_they_still_agree_after_the_clock_moves_past_every_cache(db):
    random_network(42)
    client = Client()
    with time_machine.travel(T0, tick=False) as clock:
        before = assert_surfaces_agree(client)
        clock.shift(timedelta(seconds=301))
        after = assert_surfaces_agree(client)
    assert after["generated_at"] == "2030-01-07T12:05:01Z" != before["generated_at"]


@pytest.fixture
def eager_celery():
    before = app.conf.task_always_eager, app.conf.task_eager_propagates
    app.conf.task_always_eager = app.conf.task_eager_propagates = True
    yield
    app.conf.task_always_eager, app.conf.task_eager_propagates = before


def test_jobs_run_through_the_coordinator_show_up_on_all_three_surfaces(
        db, eager_celery, django_capture_on_commit_callbacks):
    """Heartbeat, submit, lease, start, complete and fold through the real API: the figures
    published are the ones the coordinator stored."""
    from tests.helpers.network import build_net, make_catalog

    make_catalog("tiny-q4")
    net = build_net()
    _, token = net.host("runner", trust="edr")
    with django_capture_on_commit_callbacks(execute=True):
        for ttft, tokens, elapsed in ((100.0, 20, 1000.0), (200.0, 0, 500.0)):
            net.submit_id(max_tokens=64)
            net.run(token, ttft_ms=ttft, completion_tokens=tokens, elapsed_ms=elapsed)
        doomed = net.submit_id(max_tokens=64)
        assert net.lease(token).json()["id"] == doomed
        assert net.fail(token, doomed).status_code == 200
    # A tier cell is published only with hosts of two operators in it: a second team's edr host
    # (slower, so the runner's averages are the p50) comes online once the jobs have run.
    other, other_token = hosts.create_host(net.other_buyer, "other-runner", "edr")
    Host.dangerously_unscoped.filter(pk=other.pk).update(ttft_ewma_ms=300.0, tps_ewma=30.0)
    assert net.heartbeat(other_token, ["tiny-q4"]).status_code == 200

    with time_machine.travel(timezone.now(), tick=False):  # one coordinator clock for all three
        slo = assert_surfaces_agree(Client())
    week = slo["models"][0]["windows"]["7d"]
    assert (week["completed"], week["failed"], week["success_rate"]) == (2, 1, 0.666667)
    page = Page(Client().get("/benchmarks").content.decode())
    edr = page.cards["tiny-q4"]["tiers"][2]["attrs"]
    # TTFT: 100 then 200 → 0.3·200 + 0.7·100 = 130 ms; TPS: only the job with tokens → 20.
    assert (edr["data-hosts"], edr["data-ttft-p50-ms"], edr["data-tps-p50"]) == ("2", "130", "20.0")
