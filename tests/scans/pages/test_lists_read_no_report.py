"""Lists and charts read a scan's columns, never its report: the dashboard (sparklines of the
last 30 scans, with their load and URL) runs no query that touches the report column, and the
endpoint page's list of scans never loads a report, however large the stored reports are. The
base URL and the load a scan ran are columns written when the report is stored."""

from __future__ import annotations

import copy
import json
import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from scans.endpoints import profile as load_profile
from scans.history.grades import latest_grades
from scans.models import Scan
from scans.running import worker as scan_worker
from tests.helpers.factories import make_endpoint
from tests.scans.conftest import GRADE_A, report_for

pytestmark = pytest.mark.django_db

REPORT_COLUMN = '"scans_scan"."report"'
# A report holding about 1 MiB of per-request samples, as a full scan's report does.
PADDING = [{"request": i, "ttft_ms": 100.0 + i, "tokens": "x" * 500} for i in range(2000)]


def big_report(base_url: str, levels: list[int]) -> dict:
    report = copy.deepcopy(report_for(GRADE_A))
    report["target"]["base_url"] = base_url
    report["plan"]["levels"] = levels
    report["samples"] = PADDING
    return report


def stored_scan(endpoint, report: dict, hours_ago: float) -> Scan:
    scan = Scan.dangerously_unscoped.create(endpoint=endpoint, trigger="schedule")
    scan = scan_worker.store_report(scan, report)
    when = timezone.now() - timedelta(hours=hours_ago)
    Scan.dangerously_unscoped.filter(pk=scan.pk).update(queued_at=when, started_at=when)
    return scan


def test_the_dashboard_reads_no_report_and_still_marks_each_scans_load_and_url(
        world, owner_client):
    endpoint = make_endpoint(world.team, name="big reports")
    stored_scan(endpoint, big_report("http://127.0.0.1:8080/v1", [1, 4]), hours_ago=3)
    stored_scan(endpoint, big_report("http://127.0.0.1:8080/v1", [1, 4]), hours_ago=2)
    last = big_report("http://127.0.0.1:9090/v1", [1, 2, 8])
    stored_scan(endpoint, last, hours_ago=1)

    with CaptureQueriesContext(connection) as queries:
        response = owner_client.get(reverse("team-dashboard", args=[world.team.slug]))

    assert response.status_code == 200
    touching = [q["sql"] for q in queries.captured_queries if REPORT_COLUMN in q["sql"]]
    assert touching == []
    assert f'data-endpoint="{endpoint.public_id}"' in response.content.decode()
    # What the sparkline reads: each scan's URL and load, from the columns.
    (points,) = latest_grades([endpoint], n=30).values()
    assert [p.url for p in points] == ["http://127.0.0.1:8080/v1"] * 2 + [
        "http://127.0.0.1:9090/v1"]
    assert points[-1].profile == load_profile.profile_of(last["plan"]).label
    assert points[0].profile_key != points[-1].profile_key


def test_the_endpoint_page_reads_no_report(world, owner_client):
    endpoint = make_endpoint(world.team, name="big reports")
    report = big_report("http://127.0.0.1:8080/v1", [1, 4])
    for hours_ago in (3, 2, 1):
        stored_scan(endpoint, report, hours_ago=hours_ago)

    with CaptureQueriesContext(connection) as queries:
        response = owner_client.get(reverse("endpoint-detail", args=[endpoint.public_id]))

    assert response.status_code == 200
    # Not the report, nor one figure read out of it in SQL (each detoasts the whole report).
    touching = [q["sql"] for q in queries.captured_queries if REPORT_COLUMN in q["sql"]]
    assert touching == []
    # Its headline figures, from the columns.
    page = response.content.decode()
    assert "p50" in page
    # The list still names the load each scan ran.
    label = load_profile.profile_of(report["plan"]).label
    assert response.content.decode().count(f"<td class=\"small\" data-profile>{label}</td>") == 3


def test_the_columns_hold_what_the_report_says_as_the_rollups_read_it(world):
    from scans.history import rollups

    endpoint = make_endpoint(world.team, name="dataset load")
    report = big_report("http://127.0.0.1:8080/v1", [1, 4, 16])
    report["plan"]["requests_per_level"] = [20, 40, 80]
    report["plan"]["workload"] = {"warmup": 2, "output_tokens": 256, "dataset": {
        "name": "chats é.jsonl", "lines": 120, "sha256": "ab" * 32}}
    report["preflight"] = {"stopped": True, "cause": "the server refused the connection",
                           "warnings": [{"kind": "model_not_listed", "model": "m"}]}
    report["failure_summary"] = {"sentence": "every request was refused"}
    scan = stored_scan(endpoint, report, hours_ago=1)

    reading = f"{rollups._plan_sql('report')}, {rollups._url_sql('report')}"
    with connection.cursor() as cursor:  # the rollups' reading of the stored report
        cursor.execute(f"SELECT {reading} FROM scans_scan WHERE id = %s",  # noqa: S608
                       [scan.pk])
        plan, url = cursor.fetchone()
    assert scan.load_plan == (plan if isinstance(plan, dict) else json.loads(plan))
    assert scan.target_url == url == "http://127.0.0.1:8080/v1"
    assert scan.preflight_stopped is True
    assert scan.preflight_cause == "the server refused the connection"
    assert scan.failure_summary == "every request was refused"
    assert scan.preflight_warnings == [{"kind": "model_not_listed", "model": "m"}]


def test_the_apis_lists_of_endpoints_and_scans_load_no_report(world, api):
    from tests.conftest import bearer

    endpoint = make_endpoint(world.team, name="big reports")
    for hours_ago in (3, 2, 1):
        stored_scan(endpoint, big_report("http://127.0.0.1:8080/v1", [1, 4]), hours_ago)
    loaded = re.compile(r'"scans_scan"\."report"\s*(,|FROM)')
    for url in (reverse("api-endpoint-list"),
                reverse("api-endpoint-scans", kwargs={"public_id": endpoint.public_id}),
                reverse("api-endpoint-detail", kwargs={"public_id": endpoint.public_id})):
        with CaptureQueriesContext(connection) as queries:
            response = api.get(url, **bearer(world.read_only_token))
        assert response.status_code == 200, url
        assert [q["sql"] for q in queries.captured_queries if loaded.search(q["sql"])] == [], url
        assert str(endpoint.public_id) in response.content.decode()


def test_the_capacity_api_the_metrics_and_the_status_page_read_no_report(world, api, client):
    from scans.models import StatusPage, StatusPageEndpoint
    from tests.conftest import bearer

    endpoint = make_endpoint(world.team, name="big reports", capacity_search=True)
    report = big_report("http://127.0.0.1:8080/v1", [1, 4])
    report["capacity"] = {"concurrency": 4, "reason": "8 streams missed the TTFT target",
                          "levels_tried": [4, 8], "slo": {"ttft_p95_ms": 400}}
    stored_scan(endpoint, report, hours_ago=1)
    page = StatusPage.dangerously_unscoped.create(team=world.team, title="Acme", enabled=True)
    StatusPageEndpoint.dangerously_unscoped.create(status_page=page, endpoint=endpoint,
                                                   display_name="Chat")
    for url, client_kwargs, who in (
            (reverse("api-endpoint-capacity", kwargs={"public_id": endpoint.public_id}),
             bearer(world.read_only_token), api),
            (reverse("api-metrics"), bearer(world.read_only_token), api),
            (reverse("status-page", args=[page.slug]), {}, client)):
        with CaptureQueriesContext(connection) as queries:
            response = who.get(url, **client_kwargs)
        assert response.status_code == 200, url
        assert [q["sql"] for q in queries.captured_queries if REPORT_COLUMN in q["sql"]] == [], url
    capacity = api.get(reverse("api-endpoint-capacity", kwargs={"public_id": endpoint.public_id}),
                       **bearer(world.read_only_token)).json()
    assert capacity["latest"]["reason"] == "8 streams missed the TTFT target"
    assert capacity["latest"]["levels_tried"] == [4, 8]
