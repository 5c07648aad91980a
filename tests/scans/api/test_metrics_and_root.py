"""The API's root lists its resources, numbers are JSON numbers, and /api/v1/metrics gives a
team token its own team's gauges in Prometheus text (and never another team's)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from accounts import teams
from tests.conftest import bearer
from tests.helpers.factories import make_endpoint
from tests.scans.conftest import CAPPED_D, GRADE_A, scan_at

pytestmark = pytest.mark.django_db


def samples(text: str) -> dict[tuple[str, str], float]:
    """(metric name, endpoint name) → value, parsed by prometheus_client's own parser."""
    return {(s.name, s.labels["endpoint"]): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_the_api_root_lists_every_resource_with_its_url(api):
    body = api.get("/api/v1/").json()

    assert set(body) == {"me", "teams", "endpoints", "channels", "maintenance-windows", "incidents",
                         "metrics",
                         "schema", "docs", "redoc"}
    assert body["endpoints"]["url"] == "http://testserver/api/v1/endpoints"
    assert body["metrics"]["url"] == "http://testserver/api/v1/metrics"


def test_points_and_prices_are_json_numbers(world, api):
    endpoint = make_endpoint(world.team, price_input_per_mtok="0.5000",
                             price_output_per_mtok="1.2500")
    scan = scan_at(endpoint, timezone.now() - timedelta(minutes=5), GRADE_A)

    detail = api.get(f"/api/v1/endpoints/{endpoint.public_id}/",
                     **bearer(world.read_only_token)).json()
    one_scan = api.get(f"/api/v1/scans/{scan.public_id}/", **bearer(world.read_only_token)).json()

    assert detail["price_input_per_mtok"] == 0.5 and detail["price_output_per_mtok"] == 1.25
    assert detail["latest_scan"]["points"] == 100.0
    assert one_scan["points"] == 100.0 and isinstance(one_scan["points"], float)


def test_metrics_give_the_tokens_team_its_gauges_in_prometheus_text(world, api):
    healthy = make_endpoint(world.team, name="healthy box")
    scan_at(healthy, timezone.now() - timedelta(minutes=10), GRADE_A)
    failing = make_endpoint(world.team, name="failing box", slo_grade_floor="B")
    scan_at(failing, timezone.now() - timedelta(minutes=10), CAPPED_D)
    make_endpoint(world.team, name="new box")

    response = api.get("/api/v1/metrics", **bearer(world.read_only_token))

    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    got = samples(response.content.decode())
    assert got[("tokvera_endpoint_grade", "healthy box")] == 5
    assert got[("tokvera_endpoint_points", "healthy box")] == 100.0
    assert got[("tokvera_endpoint_state", "healthy box")] == 0
    assert got[("tokvera_endpoint_ttft_p95_c1_seconds", "healthy box")] == pytest.approx(0.21)
    assert got[("tokvera_endpoint_error_rate", "healthy box")] == 0.0
    assert got[("tokvera_endpoint_tokens_per_second", "healthy box")] == 49.5
    # the scan finished 9 minutes ago (queued 10 minutes ago, a minute long)
    assert 500 <= got[("tokvera_endpoint_seconds_since_last_scan", "healthy box")] < 3600
    assert got[("tokvera_endpoint_grade", "failing box")] == 2
    assert got[("tokvera_endpoint_state", "failing box")] == 2  # below floor
    assert got[("tokvera_endpoint_state", "new box")] == 5  # not yet scanned
    assert ("tokvera_endpoint_points", "new box") not in got  # absent, never a made-up 0


def test_another_teams_endpoints_show_in_no_ones_metrics(world, api):
    mine = make_endpoint(world.team, name="our box")
    theirs = make_endpoint(world.other_team, name="their secret box")
    scan_at(theirs, timezone.now(), GRADE_A)
    third_team = teams.create_team("initech-metrics", "Initech", owner=world.outsider)
    third_token = teams.issue_token(third_team, "read-only")[1]

    ours = api.get("/api/v1/metrics", **bearer(world.read_only_token)).content.decode()
    for token in (world.read_only_token, world.read_write_token, third_token):
        text = api.get("/api/v1/metrics", **bearer(token)).content.decode()
        assert "their secret box" not in text and str(theirs.public_id) not in text
    assert str(mine.public_id) in ours
    assert api.get("/api/v1/metrics").status_code == 401


def test_the_endpoints_api_gives_each_endpoint_its_state_and_cause(world, api):
    failing = make_endpoint(world.team, name="failing box", slo_grade_floor="B")
    scan = scan_at(failing, timezone.now(), CAPPED_D)

    listed = api.get("/api/v1/endpoints/", **bearer(world.read_only_token)).json()["results"]
    detail = api.get(f"/api/v1/endpoints/{failing.public_id}/",
                     **bearer(world.read_only_token)).json()

    for body in (listed[0], detail):
        assert body["state"]["state"] == "below_floor"
        assert body["state"]["cause"].startswith("grade D, below the floor B")
        assert body["state"]["scan"] == str(scan.public_id)
