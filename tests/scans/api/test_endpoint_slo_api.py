"""`GET /api/v1/endpoints/{id}/slo`: each window's status, burn rates per span,
covered share and the burn-rate pairs, from the same read model as the endpoint page; another
team's endpoint is a 404."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from tests.conftest import bearer
from tests.helpers.factories import make_endpoint
from tests.scans.conftest import GRADE_A, scan_at, with_values

pytestmark = pytest.mark.django_db

SLOW_FIRST_TOKEN = with_values(GRADE_A, ttft_p95_at_concurrency_1=900.0)


def test_an_endpoint_missing_its_ttft_target_reads_breaching_with_its_burn_rates(world, api):
    endpoint = make_endpoint(
        world.team, slo_ttft_p95_ms=500, slo_grade_floor="F", slo_objective=0.9, interval_minutes=5
    )
    now = timezone.now()
    for minutes in range(180, 0, -5):  # 3 h: half the 6 h pair's span
        scan_at(endpoint, now - timedelta(minutes=minutes), SLOW_FIRST_TOKEN)

    body = api.get(f"/api/v1/endpoints/{endpoint.public_id}/slo", **bearer(world.read_only_token)).json()

    assert body["endpoint"] == str(endpoint.public_id)
    seven, thirty = body["windows"]
    assert (seven["days"], thirty["days"]) == (7, 30)
    assert thirty["status"] == "breaching" and thirty["status_label"] == "breaching"
    assert thirty["good_share"] == 0 and thirty["bad_s"] == pytest.approx(180 * 60, abs=5)
    assert thirty["covered_share"] == pytest.approx(180 / (30 * 1440), rel=0.01)
    assert thirty["uncovered_s"] == pytest.approx(30 * 86400 - 180 * 60, abs=5)
    assert thirty["allowance"] == "90% over 30 days allows 3 d of bad time"
    rates = {b["span"]: b["rate"] for b in thirty["burn_rates"]}
    assert rates["1 h"] == pytest.approx(10) and rates["6 h"] == pytest.approx(10)
    assert [b["span_s"] for b in thirty["burn_rates"]] == [300, 1800, 3600, 7200, 21600, 86400, 259200]
    firing = {w["windows"]: w["firing"] for w in thirty["alert_windows"]}
    assert firing["6 h and 30 min"] is True and firing["1 h and 5 min"] is False
    assert thirty["alert_level"] == "page"
    ttft = next(t for t in thirty["targets"] if t["key"] == "ttft_p95")
    assert ttft["share"] == 0 and ttft["text"] == "TTFT p95 at concurrency 1 at most 500 ms"


def test_a_never_scanned_endpoint_has_no_data_not_a_zero(world, api):
    endpoint = make_endpoint(world.team)

    body = api.get(f"/api/v1/endpoints/{endpoint.public_id}/slo", **bearer(world.read_only_token)).json()

    for window in body["windows"]:
        assert window["status"] == "no_data" and window["good_share"] is None
        assert all(b["rate"] is None for b in window["burn_rates"])
    assert body["alert_level"] == ""


def test_another_teams_endpoint_slo_is_404(world, api):
    endpoint = make_endpoint(world.team)

    response = api.get(f"/api/v1/endpoints/{endpoint.public_id}/slo", **bearer(world.other_team_token))

    assert response.status_code == 404


def test_the_schema_documents_the_slo_answer(client):
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/json").json()

    (path,) = [p for p in schema["paths"] if p.rstrip("/").endswith("/endpoints/{public_id}/slo")]
    assert "get" in schema["paths"][path]
    window = schema["components"]["schemas"]["SloWindow"]["properties"]
    status = window["status"]
    ref = status.get("$ref") or (status.get("allOf") or [{}])[0].get("$ref", "")
    assert ref.endswith("StatusEnum") or "enum" in status
    assert "too little" in status.get("description", "")  # each status in plain words
    assert {"burn_rates", "covered_share", "good_share", "uncovered_s"} <= set(window)
