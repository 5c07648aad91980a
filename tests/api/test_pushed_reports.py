"""Pushed reports are proven from their own samples (issue 10, finding 2): the site recomputes
every check from the report's per-request timelines with the scanner's code, refuses claims the
samples do not give and impossible samples, stores only the recomputation, finds replays by
digest before any parsing, and limits pushes per endpoint. Real test server, real PostgreSQL,
real scans of `tokvera target` on loopback."""

from __future__ import annotations

import copy
import json

import pytest
from django.test import Client, override_settings
from django.urls import reverse

from scans.grader import scoring
from scans.grader.scoring import CheckValue
from scans.models import CheckResult, Scan
from tests.conftest import bearer
from tests.factories import make_endpoint, measured_report
from tokvera_site import parsers

pytestmark = pytest.mark.django_db


def _url(endpoint) -> str:
    return reverse("api-endpoint-reports", kwargs={"public_id": endpoint.public_id})


def _push(api, world, endpoint, report, token=None):
    body = report if isinstance(report, bytes) else json.dumps(report).encode()
    return api.post(_url(endpoint), data=body, content_type="application/json",
                    **bearer(token or world.read_write_token))


def _stored(endpoint) -> int:
    return Scan.dangerously_unscoped.filter(endpoint=endpoint).count()


def _claim(report: dict, **values: float) -> dict:
    """`report` with these check values claimed, its checks and score graded from them (what a
    forger would send: every claimed figure consistent with the claimed values)."""
    forged = copy.deepcopy(report)
    claimed = scoring.values_from_checks(forged["checks"])
    claimed.update({check_id: CheckValue(value) for check_id, value in values.items()})
    graded = scoring.grade(claimed)
    forged["checks"], forged["score"] = graded.checks, graded.score
    return forged


def test_a_forged_report_claiming_no_errors_over_all_failing_samples_is_refused_naming_error_rate(
        world, api):
    endpoint = make_endpoint(world.team, mode="pushed")
    honest = measured_report(error_rate=1.0)  # every request answered HTTP 500
    assert honest["score"]["grade"] == "F"
    assert all(level["succeeded"] == 0 for level in honest["levels"])
    forged = _claim(honest, error_rate=0.0, error_rate_at_peak=0.0)
    assert forged["score"]["grade"] == "A"  # what today's main stored
    response = _push(api, world, endpoint, forged)
    assert response.status_code == 400
    assert response.json()["report"] == ["checks.error_rate: claimed 0.0, samples give 1.0"]
    assert _stored(endpoint) == 0


def test_an_honest_report_from_a_real_scan_is_accepted_and_graded_as_the_cli_graded_it(
        world, api, tmp_path):
    from scans.grader.target import TargetConfig, running_target
    from tokvera_site.cli import main

    endpoint = make_endpoint(world.team, mode="pushed", model="tiny")
    with running_target(TargetConfig(ttft_ms=5, itl_ms=1, tokens=8)) as (host, port):
        assert main(["scan", f"http://{host}:{port}/v1", "--model", "tiny", "--concurrency",
                     "1,2", "--requests", "4", "--quiet", "--out", str(tmp_path)]) == 0
    body = (tmp_path / "report.json").read_bytes()
    cli = json.loads(body)
    response = _push(api, world, endpoint, body)
    assert response.status_code == 201, response.json()
    scan = Scan.dangerously_unscoped.get(public_id=response.json()["id"])
    assert scan.pushed and response.json()["pushed"] is True
    assert (scan.grade, float(scan.points)) == (cli["score"]["grade"], cli["score"]["points"])
    statuses = dict(CheckResult.dangerously_unscoped.filter(scan=scan)
                    .values_list("check_id", "status"))
    assert statuses == {check["id"]: check["status"] for check in cli["checks"]}
    assert scan.report["measurements"]["proven_from_samples"] is True
    owner = Client()
    owner.force_login(world.owner)
    for name in ("scan-detail", "scan-report-html"):
        assert owner.get(reverse(name, args=[scan.public_id])).status_code == 200


def test_a_claimed_grade_is_ignored_and_the_samples_grade_is_stored(world, api):
    endpoint = make_endpoint(world.team, mode="pushed")
    report = measured_report(error_rate=1.0)
    report["score"].update(grade="A", points=99.0, caps_applied=[])
    response = _push(api, world, endpoint, report)
    assert response.status_code == 201, response.json()
    assert response.json()["grade"] == "F"


@pytest.mark.parametrize(("sample", "message"), [
    (1e308, "ttft_samples_ms[0]: 1e+308 ms is outside the scan"),
    (-1e308, "ttft_samples_ms[0]: -1e+308 ms is outside the scan"),
    ("fast", "ttft_samples_ms[0]: 'fast' is not a finite number"),
    (-3.0, "ttft_samples_ms[0]: -3.0 ms is outside the scan"),
])
def test_a_report_with_an_impossible_ttft_sample_is_refused_and_never_stored(
        world, api, sample, message):
    endpoint = make_endpoint(world.team, mode="pushed")
    report = measured_report()
    report["levels"][0]["ttft_samples_ms"][0] = sample
    response = _push(api, world, endpoint, report)
    assert response.status_code == 400
    assert message in response.json()["report"][0]
    assert _stored(endpoint) == 0


@pytest.mark.parametrize(("literal", "message"), [
    ("1e999", "ttft_samples_ms[0]: inf is not a finite number"),
    ("NaN", "NaN is not JSON"),
    ("-Infinity", "-Infinity is not JSON"),
])
def test_a_non_finite_sample_is_refused(world, api, literal, message):
    endpoint = make_endpoint(world.team, mode="pushed")
    report = measured_report()
    report["levels"][0]["ttft_samples_ms"][0] = "NON-FINITE"
    body = json.dumps(report).replace('"NON-FINITE"', literal, 1)
    response = _push(api, world, endpoint, body.encode())
    assert response.status_code == 400 and message in response.json()["report"][0]
    assert _stored(endpoint) == 0


def test_more_samples_than_requests_is_refused(world, api):
    endpoint = make_endpoint(world.team, mode="pushed")
    report = measured_report()
    level = report["levels"][0]
    level["ttft_samples_ms"] = level["ttft_samples_ms"] * 3
    response = _push(api, world, endpoint, report)
    assert response.status_code == 400
    assert "samples from 3 requests" in response.json()["report"][0]


def test_a_timeline_of_the_wrong_type_is_refused(world, api):
    endpoint = make_endpoint(world.team, mode="pushed")
    report = measured_report()
    report["levels"][1]["request_timelines"][0]["completion_tokens"] = "8"
    response = _push(api, world, endpoint, report)
    assert response.status_code == 400
    assert "request_timelines[0].completion_tokens: '8' is not a valid" in \
        response.json()["report"][0]


def test_a_report_without_per_request_timelines_is_refused_not_trusted(world, api):
    endpoint = make_endpoint(world.team, mode="pushed")
    report = measured_report()
    for level in report["levels"]:
        del level["request_timelines"]
    response = _push(api, world, endpoint, report)
    assert response.status_code == 400
    assert "0 request timelines for 3 requests" in response.json()["report"][0]


def test_a_failure_hidden_from_the_counts_but_not_the_timelines_is_refused(world, api):
    endpoint = make_endpoint(world.team, mode="pushed")
    report = measured_report(error_rate=1.0)
    level = report["levels"][1]
    level["succeeded"], level["failed"] = level["requests"], {}
    response = _push(api, world, endpoint, _claim(report, error_rate_at_peak=0.0))
    assert response.status_code == 400 and "its timelines say 0" in response.json()["report"][0]


def test_a_replayed_report_returns_the_stored_scan_even_past_the_limit(world, api):
    endpoint = make_endpoint(world.team, mode="pushed")
    body = json.dumps(measured_report()).encode()
    with override_settings(REPORT_PUSH_LIMIT=1):
        first = _push(api, world, endpoint, body)
        again = _push(api, world, endpoint, body)
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["id"] == again.json()["id"]
    assert _stored(endpoint) == 1


def test_pushes_past_the_per_endpoint_limit_answer_429_with_retry_after(world, api):
    endpoint = make_endpoint(world.team, mode="pushed")
    other = make_endpoint(world.team, mode="pushed", name="another box")
    with override_settings(REPORT_PUSH_LIMIT=2, REPORT_PUSH_WINDOW_S=600):
        assert _push(api, world, endpoint, measured_report()).status_code == 201
        assert _push(api, world, endpoint, measured_report(variant=1)).status_code == 201
        refused = _push(api, world, endpoint, measured_report(variant=2))
        assert _push(api, world, other, measured_report(variant=2)).status_code == 201
    assert refused.status_code == 429
    assert 1 <= int(refused["Retry-After"]) <= 600
    assert "at most 2 reports per 600 s" in refused.json()["detail"]
    assert _stored(endpoint) == 2


def test_an_oversized_report_is_refused_before_it_is_parsed(world, api):
    endpoint = make_endpoint(world.team, mode="pushed")
    with override_settings(REPORT_MAX_BYTES=1000):
        response = _push(api, world, endpoint, b"[" * 5000)
    assert response.status_code == 413
    assert "at most 1000 bytes" in response.json()["report"][0]


def test_deeply_nested_json_is_a_clear_400(world, api):
    endpoint = make_endpoint(world.team, mode="pushed")
    response = _push(api, world, endpoint, b"[" * 100_000 + b"]" * 100_000)
    assert response.status_code == 400 and "nested too deeply" in response.json()["report"][0]


def test_a_report_nested_past_the_api_limit_is_refused_like_any_other_api_body(world, api):
    """One nesting rule for every JSON body (tokvera_site.parsers): 65 levels is refused here as
    the API parser refuses it, long before the decoder itself would give up."""
    endpoint = make_endpoint(world.team, mode="pushed")
    report = measured_report()
    deep: list = []
    report["measurements"]["note"] = deep
    for _ in range(parsers.MAX_JSON_DEPTH):
        deep.append([])
        deep = deep[0]
    response = _push(api, world, endpoint, report)
    assert response.status_code == 400
    assert response.json()["report"] == [parsers.TOO_DEEP]
    assert _stored(endpoint) == 0


def test_a_report_with_text_no_database_column_can_store_is_a_400_naming_the_place(world, api):
    endpoint = make_endpoint(world.team, mode="pushed")
    report = measured_report()
    report["measurements"]["note"] = "a\x00b"
    response = _push(api, world, endpoint, report)
    assert response.status_code == 400
    assert "/measurements/note contains NUL" in response.json()["report"][0]
    assert _stored(endpoint) == 0


def test_every_field_the_scanner_measures_per_request_travels_in_the_report():
    """The reconstruction follows the measurement code: a new RequestRecord field that the
    report's timelines do not carry fails here (add it to timeline_ms, or to NOT_PUBLISHED if
    no check reads it)."""
    import dataclasses

    from scans.grader import ScanPlan, run_scan
    from scans.grader.proof import NOT_PUBLISHED, measurement_from_report
    from scans.grader.report import report_from_measurement
    from scans.grader.target import TargetConfig, running_target

    with running_target(TargetConfig(ttft_ms=5, itl_ms=1, tokens=8, reasoning_tokens=3,
                                     error_rate=0.3, seed=7)) as (host, port):
        plan = ScanPlan(base_url=f"http://{host}:{port}/v1", model="tiny", levels=(1, 2),
                        requests=6, max_tokens=32)
        measured = run_scan(plan)
    rebuilt = measurement_from_report(report_from_measurement(plan, measured))
    for original, copy_ in zip(measured.all_requests, rebuilt.all_requests, strict=True):
        for field in dataclasses.fields(original):
            if field.name in NOT_PUBLISHED:
                continue
            mine, theirs = getattr(copy_, field.name), getattr(original, field.name)
            if isinstance(theirs, float) or hasattr(theirs, "typecode"):
                theirs = [theirs] if isinstance(theirs, float) else list(theirs)
                mine = [mine] if isinstance(mine, float) else list(mine)
                assert mine == pytest.approx([t - measured.origin_time for t in theirs],
                                             abs=1e-6), field.name
            else:
                assert mine == theirs, field.name
