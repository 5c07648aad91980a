"""One buyer's burst of jobs that no host took (`no_host`: queued past the deadline while a host
that advertises the model was online but took no work) is not a fact about how hosts run jobs:
it does not move the public success rate, and is published as its own count, `no_host`, on
/v1/slo and on the page. Driven through the coordinator's own API (heartbeat, submit, lease,
start, complete, fail) and its queue-deadline sweep."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
import time_machine
from django.test import Client

from benchmarks.models import Job
from benchmarks.network import jobs
from tests.benchmarks.public.test_hand_built_network import Page
from tests.helpers.network import T0

pytestmark = pytest.mark.django_db
BURST = 100


@pytest.fixture
def generous_limits(settings):
    settings.NETWORK_SUBMIT_LIMIT = 1000
    settings.NETWORK_MAX_UNSETTLED_PER_TEAM = 1000


def test_a_buyers_no_host_burst_leaves_the_success_rate_to_the_hosts(net, generous_limits):
    with time_machine.travel(T0, tick=False) as clock:
        _, token = net.host("h1")
        net.submit_id()
        net.run(token)  # completed
        failing = net.submit_id()
        assert net.lease(token).json()["id"] == failing
        assert net.start(token, failing).status_code == 200
        assert net.fail(token, failing).status_code == 200  # a host's failure: it counts
        net.heartbeat(token, ["tiny-q4"])  # online and advertising; it leases nothing more
        burst = [net.submit() for _ in range(BURST)]
        assert {a.status_code for a in burst} == {202}
        clock.move_to(T0 + timedelta(seconds=40))
        net.heartbeat(token, ["tiny-q4"])
        after = T0 + timedelta(seconds=130)
        # h1's one slot holds one of them (leased, never started); no host took the others.
        assert jobs.fail_past_queue_deadline(after) == BURST - 1
        assert Job.dangerously_unscoped.filter(failure_reason="no_host").count() == BURST - 1
        clock.move_to(after)
        slo = Client().get("/v1/slo").json()
        page = Page(Client().get("/benchmarks").content.decode())

    week = slo["models"][0]["windows"]["7d"]
    assert (week["completed"], week["failed"], week["success_rate"]) == (1, 1, 0.5)
    assert week["no_host"] == BURST - 1
    card = page.cards["tiny-q4"]
    assert card["attrs"]["data-model-success-7d"] == json.dumps(0.5)
    row = next(r for r in card["windows"] if r["attrs"]["data-window"] == "7d")
    assert row["attrs"]["data-success"] == "0.5" and row["attrs"]["data-no-host"] == str(BURST - 1)
    assert f"{BURST - 1} found no host" in " ".join(row["cells"])
