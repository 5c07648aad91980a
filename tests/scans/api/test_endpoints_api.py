"""The endpoints and scans API: secrets write-only, validation, triggers, history, pushes."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.db import connection
from django.urls import reverse
from django.utils import timezone

from scans.grader.scoring import CheckValue
from scans.models import CheckResult, Endpoint, Scan
from tests.conftest import bearer
from tests.helpers.factories import (
    GOOD_VALUES,
    make_channel,
    make_endpoint,
    make_report,
    make_scan,
    measured_report,
)

pytestmark = pytest.mark.django_db


def _create(api, world, **fields):
    data = {"name": "prod llama", "base_url": "http://127.0.0.1:8080/v1", "model": "tiny",
            "levels": [1, 4], **fields}
    return api.post(reverse("api-endpoint-list"), data, format="json",
                    **bearer(world.read_write_token))


def test_api_key_is_write_only_and_encrypted_at_rest(world, api):
    response = _create(api, world, api_key="sk-secret-value-123")
    assert response.status_code == 201, response.json()
    assert "sk-secret-value-123" not in response.content.decode()
    assert response.json()["has_api_key"] is True
    endpoint = Endpoint.dangerously_unscoped.get(public_id=response.json()["id"])
    assert "sk-secret-value-123" not in endpoint.api_key_encrypted
    with connection.cursor() as cursor:
        cursor.execute("SELECT api_key_encrypted FROM scans_endpoint WHERE id = %s", [endpoint.pk])
        assert "sk-secret" not in cursor.fetchone()[0]
    detail = api.get(reverse("api-endpoint-detail", kwargs={"public_id": endpoint.public_id}),
                     **bearer(world.read_only_token))
    assert "sk-secret" not in detail.content.decode()


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"levels": [4, 16]}, "scan_profile"),
        ({"levels": [1, 1]}, "scan_profile"),
        ({"base_url": "ftp://example.com/v1"}, "base_url"),
        ({"interval_minutes": 1}, "interval_minutes"),
        ({"interval_minutes": 24 * 60 + 1}, "interval_minutes"),
        ({"slo_objective": 1.5}, "slo_objective"),
        ({"model": ""}, "model"),
    ],
)
def test_invalid_endpoint_fields_get_400_naming_the_field(world, api, fields, field):
    response = _create(api, world, **fields)
    # A scan profile that cannot run as a whole is well formed field by field: a 422.
    assert response.status_code == (422 if field == "scan_profile" else 400)
    assert field in response.json()
    assert not Endpoint.dangerously_unscoped.exists()


def test_a_new_scheduled_endpoint_is_due_at_once(world, api):
    body = _create(api, world).json()
    assert body["next_scan_at"] is not None
    assert body["team"] == world.team.slug


def test_a_user_in_several_teams_must_name_the_team(world, api):
    api.force_authenticate(world.outsider)
    from accounts import teams

    teams.create_team("third", "Third", owner=world.outsider)
    response = api.post(reverse("api-endpoint-list"),
                        {"name": "x", "base_url": "http://127.0.0.1:1/v1", "model": "m"},
                        format="json")
    assert response.status_code == 400 and "team" in response.json()


def test_manual_trigger_is_rate_limited_with_retry_after(world, api):
    endpoint = make_endpoint(world.team)
    url = reverse("api-endpoint-scans", kwargs={"public_id": endpoint.public_id})
    first = api.post(url, **bearer(world.read_write_token))
    assert first.status_code == 202 and first.json()["status"] == "queued"
    second = api.post(url, **bearer(world.read_write_token))
    assert second.status_code == 429
    assert 1 <= int(second["Retry-After"]) <= 120
    assert Scan.dangerously_unscoped.filter(endpoint=endpoint).count() == 1
    with time_machine.travel(timezone.now() + timedelta(minutes=3)):
        assert api.post(url, **bearer(world.read_write_token)).status_code == 202


def test_scans_are_cursor_paginated_newest_first_and_filter_by_time(world, api):
    endpoint = make_endpoint(world.team)
    start = timezone.now() - timedelta(days=3)
    for day in range(3):
        with time_machine.travel(start + timedelta(days=day), tick=False):
            make_scan(endpoint)
    url = reverse("api-endpoint-scans", kwargs={"public_id": endpoint.public_id})
    page = api.get(url, {"page_size": 2}, **bearer(world.read_only_token)).json()
    assert len(page["results"]) == 2 and page["next"]
    rest = api.get(page["next"], **bearer(world.read_only_token)).json()
    assert len(rest["results"]) == 1
    times = [s["queued_at"] for s in page["results"] + rest["results"]]
    assert times == sorted(times, reverse=True)
    since = (start + timedelta(days=1, hours=-1)).isoformat()
    recent = api.get(url, {"since": since}, **bearer(world.read_only_token)).json()
    assert len(recent["results"]) == 2
    bad = api.get(url, {"since": "last tuesday"}, **bearer(world.read_only_token))
    assert bad.status_code == 400 and "since" in bad.json()


def test_history_returns_one_checks_values_with_their_scoring_version(world, api):
    endpoint = make_endpoint(world.team)
    for ttft in (200.0, 900.0, 300.0):
        make_scan(endpoint, make_report({**GOOD_VALUES,
                                         "ttft_p95_at_concurrency_1": CheckValue(ttft)}))
    url = reverse("api-endpoint-history", kwargs={"public_id": endpoint.public_id})
    body = api.get(url, {"check": "ttft_p95_at_concurrency_1"},
                   **bearer(world.read_only_token)).json()
    assert [p["value"] for p in body["points"]] == [200.0, 900.0, 300.0]
    assert [p["status"] for p in body["points"]] == ["pass", "warn", "pass"]
    assert {p["scoring_version"] for p in body["points"]} == {"1.0.0"}
    unknown = api.get(url, {"check": "vibes"}, **bearer(world.read_only_token))
    assert unknown.status_code == 400 and "check" in unknown.json()


def test_stored_report_is_served_back_whole(world, api):
    scan = make_scan(make_endpoint(world.team))
    response = api.get(reverse("api-scan-report", kwargs={"public_id": scan.public_id}),
                       **bearer(world.read_only_token))
    assert response.json() == scan.report
    summary = api.get(reverse("api-scan-detail", kwargs={"public_id": scan.public_id}),
                      **bearer(world.read_only_token)).json()
    assert summary["grade"] == scan.report["score"]["grade"]
    assert summary["scoring_version"] == "1.0.0" and summary["provisional"] is False


def test_a_pushed_report_is_regraded_here_not_trusted(world, api, eager_tasks):
    endpoint = make_endpoint(world.team, mode="pushed")
    forged = measured_report(error_rate=1.0)  # every request failed: the samples give F
    forged["target"]["base_url"] = endpoint.base_url
    forged["score"]["grade"] = "A"
    forged["score"]["points"] = 99.0
    forged["score"]["caps_applied"] = []
    for check in forged["checks"]:
        if check["id"] == "error_rate":
            check["status"] = "pass"
    url = reverse("api-endpoint-reports", kwargs={"public_id": endpoint.public_id})
    response = api.post(url, forged, format="json", **bearer(world.read_write_token))
    assert response.status_code == 202, response.json()  # proven by the proof task (eager)
    scan = Scan.dangerously_unscoped.get(public_id=response.json()["id"])
    # error_rate 1.0 caps at F in the re-graded report; on the site no request succeeding is
    # down, a state and not a grade
    assert scan.report["score"]["grade"] == "F"
    assert scan.down and scan.grade == "" and scan.points is None
    assert scan.pushed and scan.tool_version == forged["tool_version"]
    assert CheckResult.dangerously_unscoped.get(scan=scan, check_id="error_rate").status == "fail"


def test_a_pushed_report_that_breaks_the_schema_is_refused_and_nothing_is_stored(
        world, api, eager_tasks):
    endpoint = make_endpoint(world.team, mode="pushed")
    report = make_report()
    report["target"]["api_key"] = "sk-leak"
    del report["levels"]
    url = reverse("api-endpoint-reports", kwargs={"public_id": endpoint.public_id})
    response = api.post(url, report, format="json", **bearer(world.read_write_token))
    assert response.status_code == 202  # refused by the proof task (eager here)
    scan = Scan.dangerously_unscoped.get(endpoint=endpoint)
    assert scan.status == "refused" and scan.report is None
    assert "levels" in scan.error_reason and "api_key" in scan.error_reason
    assert not CheckResult.dangerously_unscoped.filter(endpoint=endpoint).exists()


def test_a_pushed_report_for_another_model_is_refused(world, api, eager_tasks):
    endpoint = make_endpoint(world.team, mode="pushed", model="big-model")
    url = reverse("api-endpoint-reports", kwargs={"public_id": endpoint.public_id})
    response = api.post(url, make_report(model="tiny"), format="json",
                        **bearer(world.read_write_token))
    assert response.status_code == 202
    scan = api.get(response["Location"], **bearer(world.read_write_token)).json()
    assert scan["status"] == "refused" and "big-model" in scan["error_reason"]


def test_a_malformed_id_is_404(world, api):
    response = api.get("/api/v1/endpoints/not-a-uuid/", **bearer(world.read_only_token))
    assert response.status_code == 404
    assert response.json() == {"detail": "Not found."}


def test_the_openapi_schema_documents_the_api(world, client):
    schema = client.get(reverse("api-schema"), HTTP_ACCEPT="application/json").json()
    paths = schema["paths"]
    for path in ("/api/v1/endpoints/", "/api/v1/endpoints/{public_id}/scans/",
                 "/api/v1/endpoints/{public_id}/history/", "/api/v1/endpoints/{public_id}/reports/",
                 "/api/v1/scans/{public_id}/", "/api/v1/scans/{public_id}/report.json/"):
        assert any(p.rstrip("/") == path.rstrip("/") for p in paths), path
    assert client.get(reverse("api-docs")).status_code == 200


def test_a_long_history_comes_back_downsampled_to_max_points(world, api):
    endpoint = make_endpoint(world.team)
    start = timezone.now() - timedelta(days=10)
    for i in range(12):
        with time_machine.travel(start + timedelta(hours=12 * i), tick=False):
            make_scan(endpoint, make_report({**GOOD_VALUES,
                                             "ttft_p95_at_concurrency_1": CheckValue(100.0 + i)}))
    url = reverse("api-endpoint-history", kwargs={"public_id": endpoint.public_id})
    body = api.get(url, {"check": "ttft_p95_at_concurrency_1", "max_points": 4},
                   **bearer(world.read_only_token)).json()
    assert 1 <= len(body["points"]) <= 4
    assert sum(p["scans"] for p in body["points"]) == 12
    assert min(p["value_min"] for p in body["points"]) == 100.0
    assert max(p["value_max"] for p in body["points"]) == 111.0
    bad = api.get(url, {"check": "error_rate", "max_points": 0}, **bearer(world.read_only_token))
    assert bad.status_code == 400 and "max_points" in bad.json()


def test_the_endpoint_list_is_paginated_and_shows_each_latest_scan(world, api,
                                                                   django_assert_max_num_queries):
    endpoints = [make_endpoint(world.team, name=f"e{i}") for i in range(3)]
    for endpoint in endpoints:
        make_scan(endpoint)
        make_scan(endpoint, make_report({**GOOD_VALUES, "error_rate": CheckValue(0.3)}))
    url = reverse("api-endpoint-list")
    with django_assert_max_num_queries(9):  # not one query per endpoint (the last: liveness)
        body = api.get(url, {"page_size": 2}, **bearer(world.read_only_token)).json()
    assert len(body["results"]) == 2 and body["next"]
    assert {r["latest_scan"]["grade"] for r in body["results"]} == {"F"}


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"levels": [1, 512]}, "at most 256"),
        ({"levels": [1, 2, 3, 4, 5, 6, 7, 8, 9]}, "at most 8"),
        ({"requests_per_level": 1500}, "at most 2000"),
        ({"timeout_s": 1e9}, "at most 300"),
        ({"timeout_s": 300, "requests_per_level": 40}, "at most 2 h"),
    ],
)
def test_the_site_refuses_scan_profiles_that_would_make_it_a_load_generator(world, api, fields,
                                                                           message):
    response = _create(api, world, **fields)
    assert response.status_code == 422
    assert message in " ".join(response.json()["scan_profile"])


def test_enabling_a_paused_endpoint_schedules_it(world, api):
    endpoint = make_endpoint(world.team, enabled=False, next_scan_at=None)
    url = reverse("api-endpoint-detail", kwargs={"public_id": endpoint.public_id})
    api.patch(url, {"enabled": True}, format="json", **bearer(world.read_write_token))
    endpoint.refresh_from_db()
    assert endpoint.next_scan_at is not None


def test_an_impossible_date_is_a_400_not_a_crash(world, api):
    endpoint = make_endpoint(world.team)
    url = reverse("api-endpoint-scans", kwargs={"public_id": endpoint.public_id})
    response = api.get(url, {"since": "2026-13-45T00:00:00"}, **bearer(world.read_only_token))
    assert response.status_code == 400 and "since" in response.json()


def test_an_endpoint_alerts_every_channel_or_the_ones_it_picks(world, api):
    hook = make_channel(world.team, "webhook", name="hook", url="https://hooks.example/T000/secret-path")
    created = _create(api, world)
    assert created.status_code == 201, created.json()
    assert created.json()["all_channels"] is True and created.json()["channels"] == []

    url = reverse("api-endpoint-detail", kwargs={"public_id": created.json()["id"]})
    picked = api.patch(url, {"all_channels": False, "channels": [str(hook.public_id)]},
                       format="json", **bearer(world.read_write_token))
    assert picked.status_code == 200, picked.json()
    assert picked.json()["channels"] == [str(hook.public_id)]
    assert "secret-path" not in picked.content.decode()  # a channel's URL is never shown
    endpoint = Endpoint.dangerously_unscoped.get(public_id=created.json()["id"])
    assert not endpoint.all_channels and list(endpoint.channels.all()) == [hook]

    foreign = make_channel(world.other_team, "email", name="theirs")
    refused = api.patch(url, {"channels": [str(foreign.public_id)]}, format="json",
                        **bearer(world.read_write_token))
    assert refused.status_code == 422
    assert refused.json()["channels"] == ["no such channel in the endpoint's team"]


def test_a_report_pushed_twice_is_stored_once(world, api, eager_tasks):
    endpoint = make_endpoint(world.team, mode="pushed")
    url = reverse("api-endpoint-reports", kwargs={"public_id": endpoint.public_id})
    report = measured_report()
    report["target"]["base_url"] = endpoint.base_url
    first = api.post(url, report, format="json", **bearer(world.read_write_token))
    again = api.post(url, report, format="json", **bearer(world.read_write_token))
    assert (first.status_code, again.status_code) == (202, 200)
    assert first.json()["id"] == again.json()["id"]
    assert again.json()["status"] == "succeeded"
    assert Scan.dangerously_unscoped.filter(endpoint=endpoint).count() == 1
    other = measured_report(variant=1)
    assert api.post(url, other, format="json",
                    **bearer(world.read_write_token)).status_code == 202
