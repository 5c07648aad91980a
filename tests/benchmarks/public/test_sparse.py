"""Empty cells are em dashes, never 0 ms or 100 %; a quiet network says "Not enough samples yet"."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
import time_machine
from django.test import Client

from accounts import teams
from benchmarks.models import JobStatus
from tests.benchmarks.public.test_hand_built_network import Page
from tests.conftest import make_user
from tests.helpers.network import T0, make_catalog, make_host, make_job

pytestmark = pytest.mark.django_db
BANNER = "Not enough samples yet"


@pytest.fixture
def ops(db):
    return (teams.create_team("sparse-ops", "Sparse Ops", owner=make_user("sparse-ops")),
            teams.create_team("sparse-buyer", "Sparse Buyer", owner=make_user("sparse-buyer")))


def _page(client=None) -> tuple[str, Page]:
    with time_machine.travel(T0, tick=False):
        html = (client or Client()).get("/benchmarks").content.decode()
    return html, Page(html)


def test_a_network_with_no_host_and_no_job_shows_the_banner_and_only_dashes(ops):
    make_catalog("alpha-q4", context_len=8192)
    with time_machine.travel(T0, tick=False):
        slo = Client().get("/v1/slo").json()
    html, page = _page()

    assert page.banner and BANNER in html
    card = page.cards["alpha-q4"]
    assert card["attrs"]["data-model-success-7d"] == ""
    for row in card["windows"]:
        assert row["cells"][1:] == ["—", "0 of 0", "—", "—"]
        assert row["attrs"]["data-success"] == row["attrs"]["data-latency-p50-ms"] == ""
    for row in card["tiers"]:
        assert row["cells"][1:] == ["0", "—", "—", "—"]
        assert [row["attrs"][k] for k in ("data-hosts", "data-ttft-p50-ms", "data-ttft-p95-ms",
                                          "data-tps-p50")] == ["0", "", "", ""]
    assert not re.search(r"\b0\s*ms|100(\.0)?\s*%|\b0(\.0)?\s*%", html.replace("\u00a0", " "))
    assert slo["models"][0]["windows"]["7d"] == {
        "completed": 0, "failed": 0, "success_rate": None,
        "latency": {"p50_ms": None, "p95_ms": None}, "no_host": 0}


def test_jobs_settled_more_than_7_days_ago_do_not_lift_the_banner(ops):
    _, buyer = ops
    make_catalog("alpha-q4", context_len=8192)
    make_job(buyer, "alpha-q4", settled_ago=timedelta(days=8))
    make_job(buyer, "alpha-q4", JobStatus.QUEUED)
    html, page = _page()
    assert page.banner
    assert page.cards["alpha-q4"]["windows"][1]["attrs"]["data-success"] == "1.0"


def test_one_online_host_lifts_the_banner(ops):
    operator, _ = ops
    make_catalog("alpha-q4", context_len=8192)
    make_host(operator, "lonely", "software", models=["alpha-q4"])
    html, page = _page()
    assert not page.banner and BANNER not in html


def test_one_job_settled_this_week_lifts_the_banner(ops):
    _, buyer = ops
    make_catalog("alpha-q4", context_len=8192)
    make_job(buyer, "alpha-q4", JobStatus.FAILED, settled_ago=timedelta(days=6))
    html, page = _page()
    assert not page.banner
    # One failed job is a real 0 %, not an empty cell.
    assert page.cards["alpha-q4"]["attrs"]["data-model-success-7d"] == "0.0"
    assert page.cards["alpha-q4"]["windows"][0]["cells"][1] == "0.0 %"


def test_a_job_of_a_retired_model_settled_this_week_lifts_the_banner(ops):
    _, buyer = ops
    make_catalog("alpha-q4", context_len=8192)
    make_catalog("retired-q4", active=False, context_len=8192)
    make_job(buyer, "retired-q4", settled_ago=timedelta(days=2))
    html, page = _page()
    assert not page.banner and BANNER not in html


def test_a_hardware_row_is_listed_with_0_hosts(ops):
    operator, _ = ops
    make_catalog("alpha-q4", context_len=8192)
    make_host(operator, "edr-box", "edr", models=["alpha-q4"], ttft=90.0, tps=30.0)
    _, page = _page()
    tiers = {row["attrs"]["data-tier"]: row["attrs"]["data-hosts"] for row in page.cards["alpha-q4"]["tiers"]}
    assert tiers == {"none": "0", "software": "0", "edr": "1", "hardware": "0"}


def test_a_share_is_never_rounded_up_to_100_or_down_to_0_percent(ops):
    from benchmarks.public.page import percent

    assert percent(0.99996) == "99.9\u00a0%"
    assert percent(1.0) == "100.0\u00a0%"
    assert percent(0.0004) == "0.1\u00a0%"
    assert percent(0.0) == "0.0\u00a0%"
    assert percent(None) == "—"


def test_an_empty_catalog_says_so(db):
    html, page = _page()
    assert page.cards == {}
    assert "No model is in the catalog yet." in html and BANNER in html
