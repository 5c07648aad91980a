"""Pushed reports are proven from their own samples: the site recomputes
every check from the report's per-request timelines with the scanner's code, refuses claims the
samples do not give and impossible samples, stores only the recomputation, finds replays by
digest before any parsing, and limits pushes per endpoint, replays per endpoint and bytes per
team. The upload answers 202 and the proof runs as the proof task: here in-process
(eager tasks, for what the proof decides), in tests/scans/api/test_push_workers.py on a real worker.
Real test server, real PostgreSQL, real scans of `tokvera target` on loopback."""

from __future__ import annotations

import copy
import json

import pytest
from django.test import Client, override_settings
from django.urls import reverse

from common import parsers
from scans.grader import scoring
from scans.grader.scoring import CheckValue
from scans.models import CheckResult, PushedReportBody, Scan
from tests.conftest import bearer, clear_cache
from tests.helpers.factories import make_endpoint, measured_report

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("eager_tasks")]


def _url(endpoint) -> str:
    return reverse("api-endpoint-reports", kwargs={"public_id": endpoint.public_id})


def _aimed(report: dict, endpoint) -> dict:
    """`report` as measured at the endpoint's own origin (the site refuses any other)."""
    report = copy.deepcopy(report)
    report["target"]["base_url"] = endpoint.base_url
    return report


def _push(api, world, endpoint, report, token=None):
    body = report if isinstance(report, bytes) else json.dumps(_aimed(report, endpoint)).encode()
    return api.post(_url(endpoint), data=body, content_type="application/json",
                    **bearer(token or world.read_write_token))


def _verdict(response) -> Scan:
    """The scan a push made, once its proof ran (at once: tasks are eager here)."""
    assert response.status_code == 202, response.json()
    assert response["Location"] == response.json()["url"]
    assert response.json()["url"].endswith(f"/api/v1/scans/{response.json()['id']}")
    return Scan.dangerously_unscoped.get(public_id=response.json()["id"])


def _reasons(response) -> list[str]:
    scan = _verdict(response)
    assert scan.status == "refused", (scan.status, scan.error_reason)
    assert scan.report is None and scan.grade == ""
    assert not PushedReportBody.dangerously_unscoped.filter(scan=scan).exists()
    return scan.error_reason.splitlines()


def _stored(endpoint) -> int:
    """Accepted (proven and stored) pushed scans of the endpoint."""
    return Scan.dangerously_unscoped.filter(endpoint=endpoint, status="succeeded").count()


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
    assert _reasons(response) == ["checks.error_rate: claimed 0.0, samples give 1.0"]
    assert _stored(endpoint) == 0
    assert not CheckResult.dangerously_unscoped.filter(endpoint=endpoint).exists()


def test_an_honest_report_from_a_real_scan_is_accepted_and_graded_as_the_cli_graded_it(
        world, api, tmp_path):
    from scans.grader.demo_server import TargetConfig, running_target
    from tokvera_site.cli import main

    with running_target(TargetConfig(ttft_ms=5, itl_ms=1, tokens=8)) as (host, port):
        endpoint = make_endpoint(world.team, mode="pushed", model="tiny",
                                 base_url=f"http://{host}:{port}/v1")
        assert main(["scan", f"http://{host}:{port}/v1", "--model", "tiny", "--concurrency",
                     "1,2", "--requests", "4", "--quiet", "--out", str(tmp_path)]) == 0
    body = (tmp_path / "report.json").read_bytes()
    cli = json.loads(body)
    response = _push(api, world, endpoint, body)
    assert response.json()["status"] == "queued" and response.json()["pushed"] is True
    scan = _verdict(response)
    assert scan.pushed and scan.status == "succeeded"
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
    scan = _verdict(response)
    assert scan.report["score"]["grade"] == "F"  # the samples' grade, not the claimed A
    assert scan.down and scan.grade == ""  # no request succeeded: down on the site


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
    assert message in _reasons(response)[0]
    assert _stored(endpoint) == 0


@pytest.mark.parametrize(("literal", "message"), [
    ("1e999", "ttft_samples_ms[0]: inf is not a finite number"),
    ("NaN", "NaN is not JSON"),
    ("-Infinity", "-Infinity is not JSON"),
])
def test_a_non_finite_sample_is_refused(world, api, literal, message):
    endpoint = make_endpoint(world.team, mode="pushed")
    report = _aimed(measured_report(), endpoint)
    report["levels"][0]["ttft_samples_ms"][0] = "NON-FINITE"
    body = json.dumps(report).replace('"NON-FINITE"', literal, 1)
    response = _push(api, world, endpoint, body.encode())
    assert message in _reasons(response)[0]
    assert _stored(endpoint) == 0


def test_more_samples_than_requests_is_refused(world, api):
    endpoint = make_endpoint(world.team, mode="pushed")
    report = measured_report()
    level = report["levels"][0]
    level["ttft_samples_ms"] = level["ttft_samples_ms"] * 3
    response = _push(api, world, endpoint, report)
    assert "samples from 3 requests" in _reasons(response)[0]


def test_a_timeline_of_the_wrong_type_is_refused(world, api):
    endpoint = make_endpoint(world.team, mode="pushed")
    report = measured_report()
    report["levels"][1]["request_timelines"][0]["completion_tokens"] = "8"
    response = _push(api, world, endpoint, report)
    assert "request_timelines[0].completion_tokens: '8' is not a valid" in _reasons(response)[0]


def test_a_report_without_per_request_timelines_is_refused_not_trusted(world, api):
    endpoint = make_endpoint(world.team, mode="pushed")
    report = measured_report()
    for level in report["levels"]:
        del level["request_timelines"]
    response = _push(api, world, endpoint, report)
    assert "0 request timelines for 3 requests" in _reasons(response)[0]


def test_a_failure_hidden_from_the_counts_but_not_the_timelines_is_refused(world, api):
    endpoint = make_endpoint(world.team, mode="pushed")
    report = measured_report(error_rate=1.0)
    level = report["levels"][1]
    level["succeeded"], level["failed"] = level["requests"], {}
    response = _push(api, world, endpoint, _claim(report, error_rate_at_peak=0.0))
    assert "its timelines say 0" in _reasons(response)[0]


def test_a_replayed_report_returns_the_stored_scan_even_past_the_push_limit(world, api):
    endpoint = make_endpoint(world.team, mode="pushed")
    body = json.dumps(_aimed(measured_report(), endpoint)).encode()
    with override_settings(REPORT_PUSH_LIMIT=1):
        first = _push(api, world, endpoint, body)
        again = _push(api, world, endpoint, body)
    assert (first.status_code, again.status_code) == (202, 200)
    assert first.json()["id"] == again.json()["id"]
    assert again.json()["status"] == "succeeded" and again["Location"] == first["Location"]
    assert _stored(endpoint) == 1


def test_replays_are_limited_per_endpoint_with_retry_after(world, api):
    endpoint = make_endpoint(world.team, mode="pushed")
    body = json.dumps(_aimed(measured_report(), endpoint)).encode()
    with override_settings(REPORT_REPLAY_LIMIT=2, REPORT_PUSH_WINDOW_S=600):
        assert _push(api, world, endpoint, body).status_code == 202
        assert [_push(api, world, endpoint, body).status_code for _ in range(2)] == [200, 200]
        refused = _push(api, world, endpoint, body)
    assert refused.status_code == 429
    assert 1 <= int(refused["Retry-After"]) <= 600
    assert "at most 2 replays of stored reports per 600 s" in refused.json()["detail"]
    assert Scan.dangerously_unscoped.filter(endpoint=endpoint).count() == 1


def test_a_team_past_its_bytes_per_hour_gets_429_with_retry_after_on_any_endpoint(world, api):
    """The budget is the team's: a token that makes new endpoints does not get a new one."""
    clear_cache()  # team ids start again in each test database; the counters are keyed by them
    first = make_endpoint(world.team, mode="pushed")
    second = make_endpoint(world.team, mode="pushed", name="another box")
    elsewhere = make_endpoint(world.other_team, mode="pushed")
    one = len(json.dumps(_aimed(measured_report(), first)).encode())
    with override_settings(REPORT_TEAM_BYTES=int(one * 1.5), REPORT_TEAM_BYTES_WINDOW_S=900):
        assert _push(api, world, first, measured_report()).status_code == 202
        refused = _push(api, world, second, measured_report(variant=1))
        other_team = _push(api, world, elsewhere, measured_report(variant=1),
                           token=world.other_team_token)
    assert refused.status_code == 429, refused.json()
    assert 1 <= int(refused["Retry-After"]) <= 900
    assert f"at most {int(one * 1.5)} bytes of pushed reports per 900 s for one team" in \
        refused.json()["detail"]
    assert not Scan.dangerously_unscoped.filter(endpoint=second).exists()
    assert other_team.status_code == 202


def test_a_report_measured_at_another_origin_is_refused_naming_both(world, api):
    endpoint = make_endpoint(world.team, mode="pushed", base_url="https://llm.example.com/v1")
    report = measured_report()  # measured at http://127.0.0.1:<port>/v1
    port = report["target"]["base_url"].split(":")[2].split("/")[0]
    response = _push(api, world, endpoint, json.dumps(report).encode())  # as measured
    assert _reasons(response) == [
        f"target.base_url is on http://127.0.0.1:{port}, not this endpoint's origin "
        "https://llm.example.com:443: the report measured another server"]
    assert _stored(endpoint) == 0


def test_the_same_origin_written_differently_is_accepted(world, api):
    endpoint = make_endpoint(world.team, mode="pushed", base_url="https://LLM.example.com/v1")
    report = measured_report()
    report["target"]["base_url"] = "https://llm.example.com:443/v1/"
    response = _push(api, world, endpoint, json.dumps(report).encode())
    assert _verdict(response).status == "succeeded"


def test_a_scheduled_endpoint_refuses_pushes_by_default_before_reading_the_report(world, api):
    """Issue 19, finding 4: a genuine A from another server pushed into an endpoint the site
    measures (F) made its badge "A (provisional, pushed)"."""
    endpoint = make_endpoint(world.team, mode="scheduled")
    response = _push(api, world, endpoint, measured_report())
    assert response.status_code == 409
    assert "scanned by the site on a schedule and does not accept pushed reports" in \
        response.json()["report"][0]
    assert not Scan.dangerously_unscoped.filter(endpoint=endpoint).exists()


def test_a_scheduled_endpoint_with_accepts_pushes_takes_them(world, api):
    endpoint = make_endpoint(world.team, mode="scheduled")
    url = reverse("api-endpoint-detail", kwargs={"public_id": endpoint.public_id})
    assert api.get(url, **bearer(world.read_write_token)).json()["accepts_pushes"] is False
    changed = api.patch(url, {"accepts_pushes": True}, format="json",
                        **bearer(world.read_write_token))
    assert changed.status_code == 200 and changed.json()["accepts_pushes"] is True
    scan = _verdict(_push(api, world, endpoint, measured_report()))
    assert scan.status == "succeeded" and scan.pushed


def test_pushes_past_the_per_endpoint_limit_answer_429_with_retry_after(world, api):
    endpoint = make_endpoint(world.team, mode="pushed")
    other = make_endpoint(world.team, mode="pushed", name="another box")
    with override_settings(REPORT_PUSH_LIMIT=2, REPORT_PUSH_WINDOW_S=600):
        assert _push(api, world, endpoint, measured_report()).status_code == 202
        assert _push(api, world, endpoint, measured_report(variant=1)).status_code == 202
        refused = _push(api, world, endpoint, measured_report(variant=2))
        assert _push(api, world, other, measured_report(variant=2)).status_code == 202
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
    assert "nested too deeply" in _reasons(response)[0]


def test_a_report_nested_past_the_api_limit_is_refused_like_any_other_api_body(world, api):
    """One nesting rule for every JSON body (common.parsers): 65 levels is refused here as
    the API parser refuses it, long before the decoder itself would give up."""
    endpoint = make_endpoint(world.team, mode="pushed")
    report = measured_report()
    deep: list = []
    report["measurements"]["note"] = deep
    for _ in range(parsers.MAX_JSON_DEPTH):
        deep.append([])
        deep = deep[0]
    response = _push(api, world, endpoint, report)
    assert _reasons(response) == [parsers.TOO_DEEP]
    assert _stored(endpoint) == 0


def test_a_report_with_text_no_database_column_can_store_is_a_400_naming_the_place(world, api):
    endpoint = make_endpoint(world.team, mode="pushed")
    report = measured_report()
    report["measurements"]["note"] = "a\x00b"
    response = _push(api, world, endpoint, report)
    assert "/measurements/note contains NUL" in _reasons(response)[0]
    assert _stored(endpoint) == 0


def test_every_field_the_scanner_measures_per_request_travels_in_the_report():
    """The reconstruction follows the measurement code: a new RequestRecord field that the
    report's timelines do not carry fails here (add it to timeline_ms, or to NOT_PUBLISHED if
    no check reads it)."""
    import dataclasses

    from scans.grader import ScanPlan, run_scan
    from scans.grader.demo_server import TargetConfig, running_target
    from scans.grader.proof import NOT_PUBLISHED, measurement_from_report
    from scans.grader.report import report_from_measurement

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
