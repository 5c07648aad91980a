"""Endpoint state and its cause: real scans of real loopback servers (nothing listening, a
server answering 404 for the model) become "down" with the cause on the dashboard, the endpoint
page and the alert; the other states follow the rules in scans/history/state.py."""

from __future__ import annotations

import socket
from datetime import timedelta

import pytest
from django.core import mail

from scans.grader import ScanPlan, run_scan
from scans.grader.report import report_from_measurement
from scans.history import state
from scans.models import Scan, ScanTrigger
from scans.notify import alerts
from scans.running import worker as scan_worker
from tests.helpers.factories import make_endpoint, send_alert_now
from tests.helpers.servers import Request, json_answer, serve
from tests.scans.conftest import CAPPED_D, GRADE_A, NOW, scan_at, with_values

pytestmark = pytest.mark.django_db


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _model_not_found(request: Request) -> tuple[int, dict[str, str], bytes]:
    """An OpenAI-style server that knows no model: every request gets a 404 naming it."""
    return json_answer(404, {"error": {"message": "model 'tiny' not found",
                                       "type": "not_found_error"}})


@pytest.fixture
def not_found_server():
    with serve(_model_not_found) as port:
        yield f"http://127.0.0.1:{port}/v1"


def real_scan(endpoint) -> Scan:
    """Scan the endpoint for real (the grader against its URL) and store the report as the
    worker does."""
    plan = ScanPlan(base_url=endpoint.base_url, model=endpoint.model, levels=(1, 2), requests=3,
                    max_tokens=16, timeout_s=5)
    report = report_from_measurement(plan, run_scan(plan))
    scan = Scan.dangerously_unscoped.create(endpoint=endpoint, trigger=ScanTrigger.SCHEDULE)
    return scan_worker.store_report(scan, report)


def test_an_endpoint_where_nothing_listens_is_down_because_the_connection_was_refused(
        world, owner_client):
    dead = make_endpoint(world.team, name="dead box",
                         base_url=f"http://127.0.0.1:{_free_port()}/v1")
    healthy = make_endpoint(world.team, name="a healthy box")
    scan_at(healthy, NOW, GRADE_A)
    scan = real_scan(dead)

    current = state.states_for([dead, healthy])
    assert current[dead.pk].state == "down"
    assert "connection refused" in current[dead.pk].cause
    assert current[healthy.pk].state == "up" and current[healthy.pk].cause == ""

    page = owner_client.get(f"/teams/{world.team.slug}/").content.decode()
    assert "1 down" in page and "1 up" in page
    # problems first: the dead box is listed before the healthy one despite its name
    assert page.index("dead box") < page.index("a healthy box")
    assert "connection refused (nothing is listening there)" in page

    detail = owner_client.get(f"/endpoints/{dead.public_id}/").content.decode()
    assert 'data-state="down"' in detail
    assert "connection refused (nothing is listening there)" in detail
    assert f"/scans/{scan.public_id}/" in detail


def test_a_wrong_model_name_is_down_with_the_servers_404_as_the_cause(world, not_found_server):
    endpoint = make_endpoint(world.team, base_url=not_found_server, model="tiny")
    real_scan(endpoint)

    current = state.current(endpoint)

    assert current.state == "down"
    assert current.cause.startswith("model 'tiny' not found (HTTP 404")


def test_the_alert_for_a_down_endpoint_carries_the_state_the_cause_and_a_link(world, settings):
    settings.SITE_URL = "https://tokvera.example"
    dead = make_endpoint(world.team, name="dead box", alert_email=True,
                         base_url=f"http://127.0.0.1:{_free_port()}/v1")
    scan = real_scan(dead)

    send_alert_now(dead, scan, "below_floor", "grade F is below the floor B")
    message = alerts.payload(dead, scan, "below_floor", "grade F is below the floor B")

    assert message["state"] == "down" and "connection refused" in message["cause"]
    assert message["url"] == f"https://tokvera.example/scans/{scan.public_id}/"
    (email,) = mail.outbox
    assert "State: down" in email.body
    assert "Cause: could not connect to 127.0.0.1" in email.body
    assert f"https://tokvera.example/scans/{scan.public_id}/" in email.body


def test_each_state_follows_its_rule(world):
    floor_b = {"slo_grade_floor": "B"}
    up = make_endpoint(world.team, name="up", **floor_b)
    scan_at(up, NOW, GRADE_A)
    below = make_endpoint(world.team, name="below", **floor_b)
    scan_at(below, NOW, CAPPED_D)  # grade D, errors 8 %
    degraded = make_endpoint(world.team, name="degraded", slo_grade_floor="F")
    scan_at(degraded, NOW, with_values(GRADE_A, error_rate=0.02))  # over the warn bound only
    errored = make_endpoint(world.team, name="errored")
    scan_at(errored, NOW - timedelta(hours=1), GRADE_A)
    scan_at(errored, NOW, status="errored", error_reason="the worker died")
    never = make_endpoint(world.team, name="never")

    states = state.states_for([up, below, degraded, errored, never])

    assert {e.name: states[e.pk].state for e in (up, below, degraded, errored, never)} == {
        "up": "up", "below": "below_floor", "degraded": "degraded", "errored": "errored",
        "never": "not_scanned"}
    assert states[below.pk].cause.startswith(
        "grade D, below the floor B: failed requests, all levels: 8.0 % (failed)")
    assert states[degraded.pk].cause == "failed requests, all levels: 2.0 % (over the warn bound)"
    assert states[errored.pk].cause == "the worker died"


def test_since_is_the_first_scan_of_the_current_run_of_the_state(world):
    endpoint = make_endpoint(world.team, slo_grade_floor="B")
    scan_at(endpoint, NOW - timedelta(hours=3), GRADE_A)
    scan_at(endpoint, NOW - timedelta(hours=2), CAPPED_D)
    scan_at(endpoint, NOW - timedelta(hours=1), CAPPED_D)

    current = state.current(endpoint)

    assert current.state == "below_floor"
    assert current.since == NOW - timedelta(hours=2) and current.at == NOW - timedelta(hours=1)


def test_the_dashboard_sorts_by_name_on_request(world, owner_client):
    good = make_endpoint(world.team, name="aaa good")
    scan_at(good, NOW, GRADE_A)
    bad = make_endpoint(world.team, name="zzz bad", slo_grade_floor="B")
    scan_at(bad, NOW, CAPPED_D)

    by_state = owner_client.get(f"/teams/{world.team.slug}/").content.decode()
    by_name = owner_client.get(f"/teams/{world.team.slug}/?sort=name").content.decode()

    assert by_state.index("zzz bad") < by_state.index("aaa good")
    assert by_name.index("aaa good") < by_name.index("zzz bad")


def test_the_endpoint_page_opens_with_the_headline_numbers_and_for_reasoning_models_thinking(
        world, owner_client):
    from tests.scans.conftest import report_for

    endpoint = make_endpoint(world.team, name="thinker")
    report = report_for(GRADE_A)
    report["levels"][0]["time_to_first_answer_ms"] = {"p50": 850.0, "p95": 990.0}
    report["levels"][0]["thinking_ms"] = {"p50": 640.0, "p95": 700.0}
    scan_worker.store_report(
        Scan.dangerously_unscoped.create(endpoint=endpoint, trigger=ScanTrigger.SCHEDULE), report)

    body = owner_client.get(f"/endpoints/{endpoint.public_id}/").content.decode()

    assert 'data-state="up"' in body
    assert '<dd data-figure="ttft_p50">201 ms</dd>' in body
    assert '<dd data-figure="ttft_p95">210 ms</dd>' in body
    assert '<dd data-figure="tokens_per_s">49.5</dd>' in body
    assert '<dd data-figure="error_rate">0.0%</dd>' in body
    assert '<dd data-figure="first_answer">850 ms</dd>' in body
    assert '<dd data-figure="thinking">640 ms</dd>' in body


def test_an_endpoint_going_down_and_up_again_sends_one_message_each_way(
        world, eager_tasks, django_capture_on_commit_callbacks):
    from tests.scans.conftest import report_for

    dead = make_endpoint(world.team, name="flaky box", alert_email=True,
                         base_url=f"http://127.0.0.1:{_free_port()}/v1")
    with django_capture_on_commit_callbacks(execute=True):
        scan_worker.store_report(
            Scan.dangerously_unscoped.create(endpoint=dead, trigger=ScanTrigger.SCHEDULE),
            report_for(GRADE_A))
        assert mail.outbox == []  # up from the start: nothing to say
        down_scan = real_scan(dead)  # nothing listens there now

    (down,) = mail.outbox  # one message, not "down" and "below floor"
    assert down.subject == "[Tokvera] flaky box: down"
    assert "the endpoint is down: could not connect to 127.0.0.1" in down.body
    assert f"/scans/{down_scan.public_id}/" in down.body
    mail.outbox.clear()

    with django_capture_on_commit_callbacks(execute=True):
        scan_worker.store_report(
            Scan.dangerously_unscoped.create(endpoint=dead, trigger=ScanTrigger.SCHEDULE),
            report_for(GRADE_A))

    (up,) = mail.outbox
    assert up.subject == "[Tokvera] flaky box: down recovered"
    assert "State: up" in up.body
