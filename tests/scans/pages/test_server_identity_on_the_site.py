"""What the server says of itself is stored with each scan, shown beside the grade on the
endpoint page and in the API, and a change of engine, version or hardware between two scans
is named on the compare page, as a change of load is."""

from __future__ import annotations

import copy
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from scans.grader.demo_server import TargetConfig, running_target
from scans.models import Scan
from scans.running import worker as scan_worker
from tests.conftest import bearer
from tests.helpers.factories import make_endpoint
from tests.scans.conftest import GRADE_A, report_for

pytestmark = pytest.mark.django_db


def _stated(engine: str, version: str, gpu: str) -> dict:
    report = copy.deepcopy(report_for(GRADE_A))
    report["server"] = {
        "engine": engine, "engine_version": version,
        "model": {"id": "tiny", "root": None, "max_model_len": 32768, "dtype": None,
                  "quantization": None, "parameters": None},
        "hardware": {"device": None, "gpu_names": [gpu], "tensor_parallel_size": None,
                     "kv_cache": None},
        "sources": {"engine": "http://127.0.0.1:8000/v1/models"}, "asked": []}
    return report


def _stored(endpoint, report: dict, hours_ago: float) -> Scan:
    scan = scan_worker.store_report(
        Scan.dangerously_unscoped.create(endpoint=endpoint, trigger="schedule"), report)
    when = timezone.now() - timedelta(hours=hours_ago)
    Scan.dangerously_unscoped.filter(pk=scan.pk).update(queued_at=when, started_at=when)
    return scan


def test_a_scan_of_a_server_that_states_itself_keeps_it_and_the_pages_show_it(
        world, owner_client, api, settings):
    settings.OUTBOUND_ALLOW = ["loopback"]
    with running_target(TargetConfig(ttft_ms=5, itl_ms=1, tokens=8, max_model_len=8192)) as (
            host, port):
        endpoint = make_endpoint(world.team, base_url=f"http://{host}:{port}/v1",
                                 model="tokvera-target", levels=[1], requests_per_level=3)
        scan = scan_worker.claim(Scan.dangerously_unscoped.create(endpoint=endpoint,
                                                                  trigger="manual").pk)
        assert scan_worker.execute(scan) == "succeeded"
    scan.refresh_from_db()
    assert scan.server_identity["engine"] == scan.report["server"]["engine"] == "tokvera target"
    assert "sources" not in scan.server_identity  # facts, not where each came from
    assert scan.server_label.startswith("tokvera target")
    assert "ctx 8,192" in scan.server_label

    page = owner_client.get(reverse("endpoint-detail", args=[endpoint.public_id])).content.decode()
    assert f"Server: {scan.server_label}" in page
    listed = api.get(reverse("api-endpoint-scans", kwargs={"public_id": endpoint.public_id}),
                     **bearer(world.read_only_token)).json()["results"][0]
    assert listed["server_label"] == scan.server_label
    assert listed["server"]["model"]["max_model_len"] == 8192


def test_compare_names_a_new_engine_version_and_hardware_and_says_nothing_when_unstated(
        world, owner_client):
    endpoint = make_endpoint(world.team)
    _stored(endpoint, _stated("vLLM", "0.10.2", "NVIDIA A100-SXM4-80GB"), 3)
    after = _stored(endpoint, _stated("vLLM", "0.11.0", "NVIDIA H100 80GB HBM3"), 2)

    page = owner_client.get(reverse("scan-compare", args=[after.public_id])).content.decode()
    assert "Another server." in page
    assert "engine version 0.10.2 → 0.11.0" in page
    assert "NVIDIA A100-SXM4-80GB" in page and "NVIDIA H100 80GB HBM3" in page

    # A report from an older grader states nothing: unknown is not a change.
    unstated = _stored(endpoint, copy.deepcopy(report_for(GRADE_A)), 1)
    page = owner_client.get(reverse("scan-compare", args=[unstated.public_id])).content.decode()
    assert "Another server." not in page
    assert unstated.server_label == "" and unstated.server_identity is None
