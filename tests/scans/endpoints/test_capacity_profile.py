"""Issue 22, the site: a scan profile turns the capacity search on, with the endpoint's SLO
targets as the scan's SLO, and the search stays inside the site's per-scan limits (at most
SITE_MAX_LEVEL streams; its requests, warm-up included, within what the plan leaves of the
requests and tokens per scan). The grader's side of the bound runs against a real target."""

from __future__ import annotations

import dataclasses

import pytest

from scans.endpoints import profile
from scans.endpoints import service as endpoints
from scans.grader import run_scan
from scans.grader.demo_server import TargetConfig, running_target
from scans.grader.objective import Slo
from scans.grader.plan import PlanError, ScanPlan
from scans.models import Endpoint


def _endpoint(**fields) -> Endpoint:
    return Endpoint(
        **{
            "base_url": "http://127.0.0.1:9/v1",
            "model": "m",
            "levels": [1, 4, 16],
            "capacity_search": True,
            "slo_ttft_p95_ms": 500.0,
            **fields,
        }
    )


def test_the_endpoints_slo_targets_become_the_scans_slo_and_the_search_is_bounded_by_the_site():
    plan = profile.plan_for(_endpoint(slo_error_rate=0.01, capacity_search_levels=5))
    assert plan.find_capacity and plan.search_levels == 5
    assert plan.slo == Slo((("ttft_p95_ms", 500.0), ("error_rate", 0.01)))
    assert plan.search_max_level == profile.SITE_MAX_LEVEL
    measured = sum(plan.requests_per_level)  # 20 + 20 + 64
    assert plan.search_max_requests == profile.SITE_MAX_REQUESTS_PER_SCAN - measured
    assert measured + plan.search_max_requests <= profile.SITE_MAX_REQUESTS_PER_SCAN
    assert profile.tokens_per_scan(plan) <= profile.SITE_MAX_TOKENS_PER_SCAN
    assert plan.public_dict()["find_capacity"] == {
        "max_levels": 5,
        "max_concurrency": profile.SITE_MAX_LEVEL,
        "max_requests": plan.search_max_requests,
    }


def test_without_the_search_the_plan_has_no_slo():
    plan = profile.plan_for(_endpoint(capacity_search=False))
    assert plan.slo is None and not plan.find_capacity


def test_an_error_rate_target_of_zero_refuses_every_failure():
    plan = profile.plan_for(_endpoint(slo_ttft_p95_ms=None, slo_error_rate=0.0))
    assert plan.slo == Slo((("error_rate", profile.ZERO_ERROR_RATE),))
    plan.validate()


def test_long_replies_leave_the_search_only_the_tokens_the_plan_does_not_use():
    endpoint = _endpoint(input_tokens=16_000, output_tokens=4096, requests_per_level=40)
    plan = profile.plan_for(endpoint)
    per_request = 16_000 + 4096
    assert plan.search_max_requests < profile.SITE_MAX_REQUESTS_PER_SCAN - 120
    assert (
        plan.search_max_requests
        == (profile.SITE_MAX_TOKENS_PER_SCAN - 120 * per_request) // per_request
        == 79
    )
    assert profile.tokens_per_scan(plan) <= profile.SITE_MAX_TOKENS_PER_SCAN
    profile.validate_profile(endpoint)


def test_the_deadline_covers_the_search():
    without = profile.worst_case_duration(_endpoint(capacity_search=False))
    with_search = profile.worst_case_duration(_endpoint(capacity_search_levels=8))
    # levels 2..9 at their worst: 10 + 7 + 5 + 4 + 4 + 3 + 3 + 3 rounds of the 60 s timeout
    assert (with_search - without).total_seconds() == 39 * 60


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        (
            {"slo_ttft_p95_ms": None, "slo_error_rate": None},
            "the capacity search needs an SLO target to search against",
        ),
        ({"slo_ttft_p95_ms": 0.0}, "the capacity search needs a TTFT target above 0 ms"),
        (
            {"capacity_search": False, "capacity_alert_below": 4},
            "a capacity alert needs the capacity search on",
        ),
        ({"capacity_alert_below": 0}, "a capacity alert threshold is from 1 to 256 streams"),
        ({"capacity_alert_below": 257}, "a capacity alert threshold is from 1 to 256 streams"),
        ({"capacity_search_levels": 17}, "the capacity search's levels must be from 1 to 16"),
        # 3 × 660 = 1,980 of the 2,000 requests: the first searched level (32 streams) sends 64
        (
            {"requests_per_level": 660},
            "the capacity search needs room for at least 64 more requests (its first level, 32 "
            "streams); this profile leaves 20 within the site's 2,000 requests",
        ),
        (
            {"requests_per_level": 650, "warmup": 10},
            "the capacity search needs room for at least 74 more requests",
        ),
    ],
)
def test_a_profile_the_search_cannot_run_is_refused_with_one_line(fields, says):
    with pytest.raises(PlanError) as refused:
        endpoints.check_profile(
            {name: getattr(_endpoint(**fields), name) for name in endpoints.PROFILE_FIELDS}
        )
    assert says in str(refused.value)
    assert "\n" not in str(refused.value)


def test_the_search_stops_at_the_sites_highest_concurrency():
    with running_target(TargetConfig(ttft_ms=5, itl_ms=1, tokens=2)) as (host, port):
        plan = ScanPlan(
            base_url=f"http://{host}:{port}/v1",
            model="tokvera-target",
            levels=(1, 4, 16),
            requests=20,
            timeout_s=10,
            use_nvidia_smi=False,
            slo=Slo((("error_rate", 0.5),)),
            find_capacity=True,
            search_max_level=24,
        )
        measurement = run_scan(plan)
    searched = [lv.concurrency for lv in measurement.searched_levels]
    assert searched == [24]  # 16 met, so 32, but never above 24
    assert measurement.search_exhausted


def test_the_search_stops_when_its_request_budget_is_spent():
    with running_target(TargetConfig(ttft_ms=5, itl_ms=1, tokens=2)) as (host, port):
        plan = ScanPlan(
            base_url=f"http://{host}:{port}/v1",
            model="tokvera-target",
            levels=(1, 4),
            requests=20,
            timeout_s=10,
            use_nvidia_smi=False,
            slo=Slo((("error_rate", 0.5),)),
            find_capacity=True,
            search_max_requests=45,
        )
        measurement = run_scan(dataclasses.replace(plan))
    # 8 sends 20 and 16 sends 32: 52 would pass the budget of 45
    assert [lv.concurrency for lv in measurement.searched_levels] == [8]
    assert sum(len(lv.requests) for lv in measurement.searched_levels) <= 45
    assert measurement.search_exhausted
