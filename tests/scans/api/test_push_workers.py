"""Issue 19, finding 2: a pushed report is proven off the web's request threads. The upload
answers 202 with the scan's URL and a queued scan; a real Celery worker on the proof queue
("proofs", prefork, one process) proves it, and the scan becomes succeeded with the site's grade
or refused with the reasons. Real PostgreSQL, Redis and worker; reports from real scans of
`tokvera target`."""

from __future__ import annotations

import copy
import json
from datetime import timedelta

import pytest
import time_machine
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from scans.models import CheckResult, PushedReportBody, Scan
from scans.running import worker as scan_worker
from tests.conftest import bearer
from tests.helpers import workers
from tests.helpers.factories import make_endpoint, measured_report
from tests.helpers.processes import wait_for
from tests.helpers.workers import stop
from tokvera_site.celery import app

pytestmark = [pytest.mark.redis, pytest.mark.django_db(transaction=True)]


def _push(api, world, endpoint, report: dict):
    return api.post(reverse("api-endpoint-reports", kwargs={"public_id": endpoint.public_id}),
                    data=json.dumps(report).encode(), content_type="application/json",
                    **bearer(world.read_write_token))


def _polled(api, world, url: str) -> dict:
    """GET the scan's URL as the CLI does, until it has a verdict."""
    def verdict():
        scan = api.get(url, **bearer(world.read_write_token)).json()
        return scan if scan["status"] not in ("queued", "running") else None
    return wait_for(verdict, 90, "the proof worker's verdict", every=0.3)


def test_a_push_answers_202_and_a_real_proof_worker_accepts_it(world, api, proof_worker):
    report = measured_report()
    endpoint = make_endpoint(world.team, mode="pushed", base_url=report["target"]["base_url"])
    response = _push(api, world, endpoint, report)
    assert response.status_code == 202, response.json()
    body = response.json()
    assert body["status"] == "queued" and body["grade"] == "" and body["pushed"] is True
    assert response["Location"] == body["url"] == f"http://testserver/api/v1/scans/{body['id']}"
    done = _polled(api, world, body["url"])
    assert done["status"] == "succeeded" and done["grade"] == report["score"]["grade"]
    scan = Scan.dangerously_unscoped.get(public_id=body["id"])
    assert scan.report["measurements"]["proven_from_samples"] is True
    assert CheckResult.dangerously_unscoped.filter(scan=scan).count() == len(report["checks"])
    assert not PushedReportBody.dangerously_unscoped.filter(scan=scan).exists()


def test_a_forged_push_is_refused_by_the_real_worker_with_its_reasons(world, api, proof_worker):
    report = measured_report(error_rate=1.0)
    endpoint = make_endpoint(world.team, mode="pushed", base_url=report["target"]["base_url"])
    forged = copy.deepcopy(report)
    forged["levels"][1]["ttft_samples_ms"] = forged["levels"][1]["ttft_samples_ms"] * 5
    forged["target"]["model"] = "someone-else"
    response = _push(api, world, endpoint, forged)
    assert response.status_code == 202
    done = _polled(api, world, response.json()["url"])
    assert done["status"] == "refused"
    assert done["error_reason"] == ("target.model 'someone-else' is not this endpoint's model "
                                    "'tiny'")
    assert not CheckResult.dangerously_unscoped.filter(endpoint=endpoint).exists()
    assert not PushedReportBody.dangerously_unscoped.exists()


def test_the_worker_without_q_leaves_proofs_to_the_proof_workers(world, api):
    """The run command's scan worker (threads, many scans at once, each judging its own loop
    lag) must not run seconds-long proofs: the proof queue is not among its queues."""
    app.control.purge()
    report = measured_report()
    endpoint = make_endpoint(world.team, mode="pushed", base_url=report["target"]["base_url"])
    scans_worker = workers.start()
    try:
        response = _push(api, world, endpoint, report)
        assert response.status_code == 202
        # the scan worker is up and consuming: a scan-queue ping would be answered by now
        wait_for(lambda: app.control.inspect(timeout=1).active_queues(), 60, "the scan worker")
        queues = {q["name"] for qs in app.control.inspect(timeout=1).active_queues().values()
                  for q in qs}
        assert "proofs" not in queues and "celery" in queues
        assert Scan.dangerously_unscoped.get(endpoint=endpoint).status == "queued"
    finally:
        stop(scans_worker)


def test_a_push_no_proof_worker_takes_is_reaped_with_its_own_cause_and_its_bytes_dropped(
        world, api):
    app.control.purge()
    report = measured_report()
    endpoint = make_endpoint(world.team, mode="pushed", base_url=report["target"]["base_url"])
    response = _push(api, world, endpoint, report)  # no proof worker is running
    assert response.status_code == 202
    scan = Scan.dangerously_unscoped.get(public_id=response.json()["id"])
    assert PushedReportBody.dangerously_unscoped.filter(scan=scan).exists()

    with time_machine.travel(timezone.now() + timedelta(minutes=31), tick=False):
        assert scan_worker.reap() == 1
    scan.refresh_from_db()
    assert scan.status == "errored"
    assert "no proof worker took the pushed report" in scan.error_reason
    assert not PushedReportBody.dangerously_unscoped.filter(scan=scan).exists()
    app.control.purge()


def test_the_scan_page_stops_waiting_once_a_push_is_refused(world, api, proof_worker):
    report = copy.deepcopy(measured_report())
    endpoint = make_endpoint(world.team, mode="pushed", base_url=report["target"]["base_url"])
    report["target"]["model"] = "not-this-endpoints-model"
    response = _push(api, world, endpoint, report)
    _polled(api, world, response.json()["url"])
    client = Client()
    client.force_login(world.member)
    status = client.get(reverse("scan-status", args=[response.json()["id"]])).json()
    assert status["status"] == "refused" and status["finished"] is True
