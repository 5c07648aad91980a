"""An endpoint's workload: stored with the scan profile (the load dataset
encrypted), validated against the site's limits, planned with the grader's Workload, shown
beside every grade from the scan's own report, breaking charts and flagged on compare."""

from __future__ import annotations

import copy
import json
import re
from datetime import timedelta

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.test import Client
from django.urls import reverse

from accounts import encryption
from scans.endpoints import profile
from scans.grader.plan import PlanError
from scans.history.compare import compare
from scans.models import Endpoint
from tests.conftest import bearer
from tests.helpers.factories import make_endpoint, make_report, make_scan
from tests.scans.conftest import NOW, scan_at

pytestmark = pytest.mark.django_db

DATASET = ('{"prompt": "the secret launch plan of project zebra"}\n'
           '{"messages": [{"role": "user", "content": "summarize ticket 42"}]}\n')


def form_data(**changes) -> dict:
    data = {"name": "llama on box", "base_url": "http://127.0.0.1:8080/v1", "model": "tiny",
            "mode": "scheduled", "levels_text": "1, 4", "max_tokens": 64, "timeout_s": 30,
            "interval_minutes": 60, "enabled": "on", "slo_grade_floor": "B",
            "slo_objective": 0.9, "alert_after_errors": 3, "all_channels": "on"}
    data.update(changes)
    return {k: v for k, v in data.items() if v is not None}


def workload_report(input_tokens=4000, output_tokens=256, levels=(1, 4), requests=20) -> dict:
    report = copy.deepcopy(make_report())
    report["plan"].update({"levels": list(levels), "requests_per_level": [requests] * len(levels),
                           "max_tokens": output_tokens or 64})
    report["plan"]["workload"] = {
        "input_tokens": input_tokens, "output_tokens": output_tokens,
        "shared_prefix_tokens": None, "max_tokens": output_tokens or 64, "dataset": None,
        "warmup": 0, "nonce": {"scan": "0000000001", "format": "[scan-request]"},
        "sizing": "tokenize", "sizing_detail": None, "sizing_requests": 3,
        "max_model_len": None,
        "output_length": {"enforced": True, "sent": ["max_tokens"], "note": "enforced"}}
    return report


def owner(world) -> Client:
    client = Client()
    client.force_login(world.owner)
    return client


# -- the form ------------------------------------------------------------------------------------

def test_the_form_stores_a_workload_and_its_dataset_encrypted(world):
    client = owner(world)
    upload = SimpleUploadedFile("load.jsonl", DATASET.encode(), "application/jsonl")
    response = client.post(reverse("endpoint-create", args=[world.team.slug]), form_data(
        output_tokens=64, warmup=2, load_dataset=upload))
    assert response.status_code == 302, response.content.decode()[:3000]
    endpoint = Endpoint.dangerously_unscoped.get()
    assert (endpoint.output_tokens, endpoint.warmup, endpoint.input_tokens) == (64, 2, None)
    assert endpoint.has_load_dataset
    assert encryption.decrypt(endpoint.load_dataset_encrypted) == DATASET
    with connection.cursor() as cursor:
        cursor.execute("SELECT load_dataset_encrypted FROM scans_endpoint WHERE id = %s",
                       [endpoint.pk])
        assert "zebra" not in cursor.fetchone()[0]
    page = client.get(reverse("endpoint-edit", args=[endpoint.public_id])).content.decode()
    assert "A load dataset is stored." in page and "zebra" not in page

    plan = profile.plan_for(endpoint)
    assert plan.max_tokens == 64 and plan.workload.output_tokens == 64
    assert plan.workload.warmup == 2
    assert plan.workload.dataset is not None and plan.workload.dataset.lines == 2
    assert plan.workload.dataset.items[1][0]["content"] == "summarize ticket 42"

    response = client.post(reverse("endpoint-edit", args=[endpoint.public_id]),
                           form_data(output_tokens=64, clear_load_dataset="on"))
    assert response.status_code == 302
    endpoint.refresh_from_db()
    assert not endpoint.has_load_dataset and profile.plan_for(endpoint).workload.dataset is None


@pytest.mark.parametrize(("changes", "field", "message"), [
    ({"input_tokens": 40_000}, "input_tokens", "input tokens can be at most 32,768"),
    ({"output_tokens": 5000}, "output_tokens", "output tokens can be at most 4,096"),
    ({"input_tokens": 100, "shared_prefix_tokens": 200}, "shared_prefix_tokens",
     "shared prefix tokens 200 must be below input tokens 100"),
    ({"warmup": 500}, "warmup", "at most 100"),
    ({"input_tokens": 30_000, "output_tokens": 4000, "requests_per_level": 200}, None,
     "at most 4,000,000 per scan"),
])
def test_the_form_refuses_an_over_limit_workload_at_its_field(world, changes, field, message):
    response = owner(world).post(reverse("endpoint-create", args=[world.team.slug]),
                                 form_data(**changes))
    assert response.status_code == 400
    form = response.context["form"]
    errors = " ".join(form.errors.get(field or "__all__", []))
    assert message in errors, form.errors
    assert not Endpoint.dangerously_unscoped.exists()


def test_the_form_refuses_a_dataset_that_is_not_jsonl(world):
    upload = SimpleUploadedFile("load.jsonl", b'{"prompt": "ok"}\nnot json\n')
    response = owner(world).post(reverse("endpoint-create", args=[world.team.slug]),
                                 form_data(load_dataset=upload))
    assert response.status_code == 400
    assert "line 2: not JSON" in " ".join(response.context["form"].errors["load_dataset"])


# -- the API -------------------------------------------------------------------------------------

def test_the_api_takes_a_workload_and_a_write_only_dataset(world, api):
    response = api.post(reverse("api-endpoint-list"), {
        "name": "prod", "base_url": "http://127.0.0.1:8080/v1", "model": "tiny",
        "levels": [1, 4], "input_tokens": 2000, "shared_prefix_tokens": 500,
        "output_tokens": 128, "max_tokens": 128, "load_dataset": ""},
        format="json", **bearer(world.read_write_token))
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["input_tokens"], body["shared_prefix_tokens"], body["output_tokens"]) == (
        2000, 500, 128)
    assert body["has_load_dataset"] is False and "load_dataset" not in body
    url = reverse("api-endpoint-detail", kwargs={"public_id": body["id"]})
    refused = api.patch(url, {"load_dataset": DATASET}, format="json",
                        **bearer(world.read_write_token))
    assert refused.status_code == 422  # a dataset and a prompt length exclude each other
    assert "exclude each other" in " ".join(refused.json()["scan_profile"])
    done = api.patch(url, {"load_dataset": DATASET, "input_tokens": None,
                           "shared_prefix_tokens": None}, format="json",
                     **bearer(world.read_write_token))
    assert done.status_code == 200, done.json()
    assert done.json()["has_load_dataset"] is True and "zebra" not in done.content.decode()
    endpoint = Endpoint.dangerously_unscoped.get()
    assert "zebra" not in endpoint.load_dataset_encrypted
    assert profile.plan_for(endpoint).workload.dataset.lines == 2
    removed = api.patch(url, {"load_dataset": ""}, format="json",
                        **bearer(world.read_write_token))
    assert removed.json()["has_load_dataset"] is False


@pytest.mark.parametrize(("fields", "message"), [
    ({"input_tokens": 40_000}, "at most 32,768"),
    ({"warmup": 101}, "at most 100 requests per level"),
    ({"input_tokens": 30_000, "requests_per_level": 200}, "per scan here"),
])
def test_the_api_refuses_over_limit_workloads_as_scan_profile(world, api, fields, message):
    response = api.post(reverse("api-endpoint-list"), {
        "name": "prod", "base_url": "http://127.0.0.1:8080/v1", "model": "tiny",
        "levels": [1, 4], **fields}, format="json", **bearer(world.read_write_token))
    assert response.status_code == 422  # well formed, but the profile cannot run here
    assert message in " ".join(response.json()["scan_profile"])


def test_a_bad_dataset_is_refused_by_the_api_naming_the_line(world, api):
    response = api.post(reverse("api-endpoint-list"), {
        "name": "prod", "base_url": "http://127.0.0.1:8080/v1", "model": "tiny",
        "load_dataset": '{"prompt": "ok"}\n{"nope": 1}\n'}, format="json",
        **bearer(world.read_write_token))
    assert response.status_code == 422  # text the schema takes, not JSONL a scan can use
    assert "line 2" in " ".join(response.json()["load_dataset"])


def test_validate_profile_counts_tokens_per_scan():
    endpoint = Endpoint(base_url="http://127.0.0.1:8080/v1", model="m", levels=[1, 4],
                        requests_per_level=100, max_tokens=256, timeout_s=10,
                        input_tokens=16_000)
    with pytest.raises(PlanError, match="about 3,251,200 tokens|per scan"):
        endpoint.requests_per_level = 300
        profile.validate_profile(endpoint)
    endpoint.requests_per_level = 20
    profile.validate_profile(endpoint)


# -- beside every grade --------------------------------------------------------------------------

def test_pages_show_the_load_of_the_scan_behind_the_grade(world):
    endpoint = make_endpoint(world.team, input_tokens=100)  # today's settings differ
    scan = make_scan(endpoint, report=workload_report())
    client = owner(world)
    label = "1/4 × 20, 4,000 → 256 tokens"
    page = client.get(reverse("endpoint-detail", args=[endpoint.public_id])).content.decode()
    assert f"Load: {label}" in page
    dashboard = client.get(reverse("team-dashboard", args=[world.team.slug])).content.decode()
    assert label in dashboard
    scan_page = client.get(reverse("scan-detail", args=[scan.public_id])).content.decode()
    assert label in scan_page


def test_the_default_load_reads_as_built_in_prompts():
    report = make_report()
    assert profile.profile_of(report["plan"]).label == (
        "1/4 × 20/40, built-in prompts → ≤64 tokens, no nonce")
    report["plan"]["workload"] = {"warmup": 0, "dataset": None}
    assert profile.profile_of(report["plan"]).label == "1/4 × 20/40, built-in prompts → ≤64 tokens"


# -- charts and compare --------------------------------------------------------------------------

def test_a_workload_change_breaks_the_grade_chart_and_is_flagged_on_compare(world, monkeypatch):
    endpoint = make_endpoint(world.team)
    reports = iter([workload_report(), workload_report(), workload_report(input_tokens=8000),
                    workload_report(input_tokens=8000)])
    monkeypatch.setattr("tests.scans.conftest.report_for",
                        lambda values, version, model="tiny": next(reports))
    scans = [scan_at(endpoint, NOW - timedelta(days=3 - i)) for i in range(4)]
    from scans.history.grades import grade_history, latest_grades

    points = grade_history(endpoint, NOW - timedelta(days=5), NOW)
    assert [p.profile for p in points][1:3] == ["1/4 × 20, 4,000 → 256 tokens",
                                              "1/4 × 20, 8,000 → 256 tokens"]
    from scans.pages import charts

    svg = str(charts.grade_chart(points, NOW - timedelta(days=5), NOW))
    assert 'data-breaks="1"' in svg and 'data-segments="2"' in svg
    assert 'data-kind="load"' in svg and ">new load<" in svg
    spark = str(charts.sparkline(latest_grades([endpoint])[endpoint.pk]))
    assert 'data-breaks="1"' in spark
    with time_travel(NOW):
        page = owner(world).get(reverse("endpoint-detail", args=[endpoint.public_id]),
                                {"range": "7d"}).content.decode()
    assert 'data-profiles="2"' in page

    same = compare(scans[0].report, scans[1].report)
    assert same.same_load
    moved = compare(scans[1].report, scans[2].report)
    assert not moved.same_load and moved.same_version
    assert "input_tokens 4000 vs 8000" in " ".join(moved.load_differences)
    assert "different loads" in moved.reasons[0]
    html = owner(world).get(reverse("scan-compare", args=[scans[2].public_id]),
                            {"with": str(scans[1].public_id)}).content.decode()
    assert 'data-same-load="false"' in html and "Different loads." in html


def time_travel(when):
    import time_machine

    return time_machine.travel(when, tick=False)


def test_the_dataset_is_parsed_in_memory_by_the_grader_reader():
    dataset = profile.parse_load_dataset(DATASET)
    assert dataset.lines == 2 and dataset.path == "load-dataset.jsonl"
    with pytest.raises(Exception, match=r"the dataset, line 1: not JSON"):
        profile.parse_load_dataset("nope\n")
    assert json.loads(DATASET.splitlines()[0])["prompt"] in dataset.items[0][0]["content"]
    assert not re.search(r"/proc/self/fd", str(dataset))
