"""The proof workers' turns (scans/running/pushes.py, claim_turn): choosing the next report to prove
reads a few rows per waiting team, however many reports one team has queued, so a big backlog
does not slow every team's verdict; and a report another turn claimed while its own turn could
not be sent is kept, and said to be kept. Real PostgreSQL (EXPLAIN ANALYZE of the queries the
claim runs) and the real Celery publish path against a broker address nothing listens on."""

from __future__ import annotations

import json

import pytest
from celery import signals
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from scans.models import PushedReportBody, Scan
from scans.running import pushes
from tests.conftest import bearer, free_port
from tests.helpers.factories import make_endpoint, measured_report
from tokvera_site.celery import app as celery_app

pytestmark = pytest.mark.django_db

BACKLOG = 2000


def _queue_pushed(endpoint, count: int) -> list[int]:
    """Queued pushed scans as an upload leaves them (their proofs not started)."""
    Scan.dangerously_unscoped.bulk_create(
        Scan(endpoint=endpoint, trigger="push", location="pushed", pushed=True)
        for _ in range(count))
    return list(Scan.dangerously_unscoped.filter(endpoint=endpoint, status="queued")
                .order_by("queued_at", "pk").values_list("pk", flat=True))


def _rows_read(plan: dict) -> int:
    """Rows every node of an EXPLAIN ANALYZE plan produced, over all its loops."""
    rows = int(plan.get("Actual Rows", 0) * plan.get("Actual Loops", 1))
    return rows + sum(_rows_read(child) for child in plan.get("Plans", []))


def _explained_rows(sql: str) -> int:
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}")
        plan = cursor.fetchone()[0]
        transaction.set_rollback(True)  # an explained UPDATE really runs: undo it
    plan = json.loads(plan) if isinstance(plan, str) else plan
    return _rows_read(plan[0]["Plan"])


def test_choosing_the_next_proof_reads_rows_by_team_not_by_backlog(world):
    busy = make_endpoint(world.team, mode="pushed")
    quiet = make_endpoint(world.other_team, mode="pushed")
    backlog = _queue_pushed(busy, BACKLOG)
    (single,) = _queue_pushed(quiet, 1)

    assert pushes.claim_turn() == backlog[0]  # neither team served yet: the oldest report
    with CaptureQueriesContext(connection) as claim:
        due = pushes.claim_turn()
    assert due == single  # the team served last waits: the other team's report is next

    statements = [q["sql"] for q in claim.captured_queries
                  if q["sql"].lstrip().upper().startswith(("SELECT", "WITH", "UPDATE"))]
    read = sum(_explained_rows(sql) for sql in statements)
    # Two teams wait; the busy one has 1,999 reports queued. Reading them all (to sort them,
    # or to look up each one's team) is what made every turn slower as the backlog grew.
    assert read < 100, (read, statements)
    assert len(claim.captured_queries) < 10


@pytest.fixture
def broker_down():
    """The site's publishes go to a loopback port nothing listens on (the broker is down)."""
    original = celery_app.conf.broker_write_url
    celery_app.conf.broker_write_url = f"redis://127.0.0.1:{free_port()}/0"
    celery_app.amqp._producer_pool = None
    celery_app._pool = None
    try:
        yield
    finally:
        celery_app.conf.broker_write_url = original
        celery_app.amqp._producer_pool = None
        celery_app._pool = None


def _push(api, world, endpoint, body: bytes):
    return api.post(reverse("api-endpoint-reports", kwargs={"public_id": endpoint.public_id}),
                    data=body, content_type="application/json", **bearer(world.read_write_token))


def test_a_report_another_turn_proved_while_its_own_turn_failed_to_send_is_kept(
        world, api, broker_down):
    report = measured_report()
    endpoint = make_endpoint(world.team, mode="pushed", base_url=report["target"]["base_url"])
    proven: list[str] = []

    def another_worker_takes_its_turn(**_):  # a turn of an earlier upload, on a proof worker
        proven.append(pushes.prove_pending(0))

    signals.before_task_publish.connect(another_worker_takes_its_turn, weak=False)
    try:
        response = _push(api, world, endpoint, json.dumps(report).encode())
    finally:
        signals.before_task_publish.disconnect(another_worker_takes_its_turn)

    assert proven == ["succeeded"]
    # The report was proven and stored: the answer says so, not "nothing was kept".
    assert response.status_code == 202, response.json()
    scan = Scan.dangerously_unscoped.get(endpoint=endpoint)
    assert response.json()["id"] == str(scan.public_id)
    assert response.json()["status"] == "succeeded" and scan.grade == report["score"]["grade"]


def test_a_report_no_turn_claimed_is_not_kept_when_its_turn_cannot_be_sent(
        world, api, broker_down):
    report = measured_report()
    endpoint = make_endpoint(world.team, mode="pushed", base_url=report["target"]["base_url"])
    response = _push(api, world, endpoint, json.dumps(report).encode())
    assert response.status_code == 503, response.json()
    assert int(response["Retry-After"]) > 0
    assert "nothing was kept" in response.json()["detail"]
    assert not Scan.dangerously_unscoped.filter(endpoint=endpoint).exists()
    assert not PushedReportBody.dangerously_unscoped.exists()
