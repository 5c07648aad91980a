"""Capacity within the SLO on the site: what the endpoint page, the dashboard, the
form, the API and the team's gauge say for each answer a search can give ("serves up to N",
"no level met the SLO", "met at the highest level tried"), and for an endpoint that never
searched. Reports are stored through scans.running.worker.store_report, as the worker does; the
end-to-end run against a six-slot target is tests/scans/running/test_capacity_on_the_site.py.
"""

from __future__ import annotations

import copy
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families
from rest_framework.test import APIClient

from scans.models import Endpoint, Scan, ScanTrigger
from scans.running import worker as scan_worker
from tests.conftest import bearer
from tests.helpers.factories import make_endpoint
from tests.scans.conftest import report_for, scan_at
from tests.scans.pages.test_endpoint_form import form_data

pytestmark = pytest.mark.django_db

SLO = {"ttft_p95_ms": 80.0, "attainment": 0.95}
MET = {
    "concurrency": 6,
    "requests_per_s": 52.5,
    "output_tokens_per_s": 210.0,
    "output_unit": "tokens/s",
    "attainment": 1.0,
    "slo": SLO,
    "levels_tried": [1, 4, 5, 6, 7, 10, 16],
    "searched_levels": 4,
    "bound_reached": False,
    "reason": "concurrency 7 missed the SLO",
}
NONE_MET = {
    **MET,
    "concurrency": None,
    "requests_per_s": None,
    "output_tokens_per_s": None,
    "output_unit": None,
    "attainment": None,
    "levels_tried": [1, 4, 16],
    "searched_levels": 0,
    "reason": "no level met the SLO (not even concurrency 1)",
}
AT_HIGHEST = {
    **MET,
    "concurrency": 256,
    "levels_tried": [1, 4, 16, 32, 64, 128, 256],
    "bound_reached": True,
    "reason": "met at the highest level tried: the search stopped at its bound, the capacity may be higher",
}


def searched_scan(endpoint: Endpoint, capacity: dict, hours_ago: float = 1.0) -> Scan:
    """A scan whose report carries `capacity`, stored as the worker stores it."""
    report = copy.deepcopy(report_for(model=endpoint.model))
    report["capacity"] = copy.deepcopy(capacity)
    report["plan"]["slo"] = SLO
    scan = Scan.dangerously_unscoped.create(endpoint=endpoint, trigger=ScanTrigger.SCHEDULE)
    scan_worker.store_report(scan, report)
    when = timezone.now() - timedelta(hours=hours_ago)
    Scan.dangerously_unscoped.filter(pk=scan.pk).update(queued_at=when, finished_at=when)
    scan.refresh_from_db()
    return scan


@pytest.fixture
def searching(world) -> Endpoint:
    return make_endpoint(
        world.team,
        name="llama with slots",
        capacity_search=True,
        slo_ttft_p95_ms=80.0,
        capacity_alert_below=4,
    )


def page(client, endpoint) -> str:
    return client.get(reverse("endpoint-detail", args=[endpoint.public_id])).content.decode()


def test_the_page_says_how_many_streams_the_latest_search_found_and_draws_the_trend(owner_client, searching):
    searched_scan(searching, NONE_MET, hours_ago=3)
    latest = searched_scan(searching, MET, hours_ago=1)
    scan_at(searching, timezone.now() - timedelta(minutes=30))  # a later scan that did not search

    body = page(owner_client, searching)

    assert "Serves up to <strong>6 concurrent streams</strong> within its SLO." in body
    assert "SLO: TTFT ≤ 80.0 ms, for 95.0 % of requests" in body
    assert "Goodput at that level: 52.5 requests/s, 210.0 tokens/s" in body
    assert "Levels tried: 1/4/5/6/7/10/16" in body
    assert str(latest.public_id) in body
    assert "Alert when it drops below 4 streams" in body
    # the trend: a point at 0 (no level met) and one at 6; the alert's line beside them
    chart = body[body.index('data-chart="capacity"') - 200 :]
    assert 'data-series="capacity"' in chart and 'data-series="alert_below"' in chart
    values = [v for v in ("0", "6") if f'data-value="{v}" data-scans="1" data-series="capacity"' in chart]
    assert values == ["0", "6"]


@pytest.mark.parametrize(
    ("capacity", "says"),
    [
        (NONE_MET, "<strong>No level met the SLO</strong>: not even one stream at a time within it."),
        (
            AT_HIGHEST,
            "Met the SLO at the highest level tried (<strong>256</strong>): it serves at "
            "least 256 concurrent streams within its SLO, and may serve more.",
        ),
    ],
)
def test_the_page_gives_the_honest_answers(owner_client, searching, capacity, says):
    searched_scan(searching, capacity)
    assert says in page(owner_client, searching)


def test_an_endpoint_that_never_searched_says_the_search_is_off(owner_client, endpoint):
    scan_at(endpoint, timezone.now() - timedelta(hours=1))
    body = page(owner_client, endpoint)
    assert "The capacity search is off: turn it on in the" in body
    assert 'data-chart="capacity"' not in body


def test_the_dashboard_shows_the_capacity_beside_the_grade(owner_client, world, searching, endpoint):
    searched_scan(searching, MET)
    scan_at(endpoint, timezone.now() - timedelta(hours=1))
    body = owner_client.get(reverse("team-dashboard", args=[world.team.slug])).content.decode()
    row = body[body.index(f'data-endpoint="{searching.public_id}"') :]
    row = row[: row.index("</tr>")]
    assert 'data-capacity="met"' in row and "up to 6 streams within the SLO" in row
    other = body[body.index(f'data-endpoint="{endpoint.public_id}"') :]
    assert "data-capacity=" not in other[: other.index("</tr>")]


def test_the_capacity_api_returns_the_trend_and_buckets_a_long_one(world, searching):
    for hours, capacity in ((5, MET), (4, NONE_MET), (3, MET), (2, AT_HIGHEST)):
        searched_scan(searching, capacity, hours_ago=hours)
    url = f"/api/v1/endpoints/{searching.public_id}/capacity"
    api = APIClient()

    body = api.get(url, **bearer(world.read_only_token)).json()
    assert [(p["outcome"], p["concurrency"], p["streams"]) for p in body["points"]] == [
        ("met", 6, 6.0),
        ("none_met", None, 0.0),
        ("met", 6, 6.0),
        ("met_at_highest", 256, 256.0),
    ]
    assert body["latest"]["outcome"] == "met_at_highest"
    assert body["latest"]["levels_tried"] == AT_HIGHEST["levels_tried"]
    assert body["latest"]["slo"] == SLO

    bucketed = api.get(url + "?max_points=1", **bearer(world.read_only_token)).json()["points"]
    assert len(bucketed) == 1
    [bucket] = bucketed
    assert bucket["scans"] == 4 and bucket["none_met"] == 1 and bucket["met_at_highest"] == 1
    assert (bucket["streams_min"], bucket["streams_max"]) == (0.0, 256.0)
    assert bucket["outcome"] == "" and bucket["concurrency"] is None

    assert api.get(url + "?max_points=0", **bearer(world.read_only_token)).status_code == 400
    # another team's token: not found, nothing of it
    foreign = api.get(url, **bearer(world.other_team_token))
    assert foreign.status_code == 404 and "256" not in foreign.content.decode()


def _samples(world, name: str) -> dict[str, float]:
    text = APIClient().get("/api/v1/metrics", **bearer(world.read_only_token)).content.decode()
    return {
        s.labels["endpoint"]: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    }


def test_the_gauge_has_a_sample_only_where_a_scan_searched(world, searching, endpoint):
    scan_at(endpoint, timezone.now() - timedelta(hours=1))
    searched_scan(searching, MET, hours_ago=2)
    assert _samples(world, "tokvera_endpoint_capacity_concurrency") == {"llama with slots": 6.0}
    searched_scan(searching, NONE_MET, hours_ago=1)
    assert _samples(world, "tokvera_endpoint_capacity_concurrency") == {"llama with slots": 0.0}
    assert _samples(world, "tokvera_endpoint_capacity_at_search_bound") == {"llama with slots": 0.0}


def test_the_form_turns_the_search_on_with_the_slo_targets(world, owner_client):
    response = owner_client.post(
        reverse("endpoint-create", args=[world.team.slug]),
        form_data(slo_ttft_p95_ms=500, capacity_search="on", capacity_alert_below=8),
    )
    assert response.status_code == 302
    endpoint = Endpoint.dangerously_unscoped.get(team=world.team)
    assert endpoint.capacity_search and endpoint.capacity_alert_below == 8
    assert endpoint.capacity_search_levels == 8  # blank: the default


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        (
            {"capacity_search": "on"},
            "This scan profile cannot run: the capacity search needs an SLO target to search against",
        ),
        (
            {"capacity_alert_below": 8, "slo_ttft_p95_ms": 500},
            "This scan profile cannot run: a capacity alert needs the capacity search on.",
        ),
        (
            {"capacity_search": "on", "slo_ttft_p95_ms": 500, "requests_per_level": 660},
            "This scan profile cannot run: the capacity search needs room for at least 64 more requests",
        ),
    ],
)
def test_the_form_refuses_a_search_that_cannot_run_with_a_clear_error(world, owner_client, changes, says):
    response = owner_client.post(reverse("endpoint-create", args=[world.team.slug]), form_data(**changes))
    assert response.status_code == 400
    assert says in response.content.decode()
    assert not Endpoint.dangerously_unscoped.filter(team=world.team).exists()


def test_the_api_refuses_a_search_that_cannot_run_and_accepts_one_that_can(world):
    api = APIClient()
    endpoint = make_endpoint(world.team, levels=[1, 4, 16], requests_per_level=None)
    url = f"/api/v1/endpoints/{endpoint.public_id}/"
    refused = api.patch(url, {"capacity_search": True}, format="json", **bearer(world.read_write_token))
    assert refused.status_code == 422  # schema-valid, but the profile cannot run as a whole
    assert "the capacity search needs an SLO target" in refused.json()["scan_profile"][0]
    too_big = api.patch(
        url,
        {"capacity_search": True, "slo_error_rate": 0.01, "capacity_alert_below": 300},
        format="json",
        **bearer(world.read_write_token),
    )
    assert too_big.status_code == 422
    accepted = api.patch(
        url,
        {"capacity_search": True, "slo_error_rate": 0.0, "capacity_alert_below": 4},
        format="json",
        **bearer(world.read_write_token),
    )
    assert accepted.status_code == 200, accepted.content
    assert accepted.json()["capacity_search"] is True
    endpoint.refresh_from_db()
    assert endpoint.capacity_search and endpoint.capacity_alert_below == 4
