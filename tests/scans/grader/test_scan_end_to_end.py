"""A whole scan against the reference target on loopback: measurement, checks, report, HTML."""

from __future__ import annotations

import re

from scans.grader import ScanPlan, run_scan
from scans.grader.check_values import check_values
from scans.grader.demo_server import TargetConfig, running_target
from scans.grader.report import regrade, report_from_measurement
from scans.grader.report_html import render_html
from tests.helpers.servers import validate_report

FAST = dict(ttft_ms=5, itl_ms=1, tokens=12)


def _scan(config: TargetConfig, **plan_kwargs):
    with running_target(config) as (host, port):
        plan = ScanPlan(base_url=f"http://{host}:{port}/v1", model="demo",
                        **{"levels": (1, 4), "requests": 8, "max_tokens": 64, **plan_kwargs})
        measurement = run_scan(plan)
    return plan, measurement


def test_a_scan_of_the_reference_target_measures_every_level_and_grades_it():
    plan, m = _scan(TargetConfig(**FAST))
    report = report_from_measurement(plan, m)
    validate_report(report)
    assert [lv["concurrency"] for lv in report["levels"]] == [1, 4]
    for level in report["levels"]:
        assert level["succeeded"] == 8 and level["failed"] == {}
        assert level["ttft_ms"]["p50"] is not None and level["chunk_gap_ms"]["p95"] is not None
        assert level["generation_rate"]["basis"] == "tokens"
        assert len(level["request_timelines"]) == 8
    checks = {c["id"]: c for c in report["checks"]}
    assert checks["metrics_endpoint"]["value"] is True
    assert checks["usage_reported_share"]["value"] == 1.0
    assert checks["error_rate"]["value"] == 0.0
    assert checks["generation_rate_load_ratio"]["basis"] == "tokens"
    assert checks["repeat_prompt_share"]["status"] == "insufficient_evidence"
    assert report["score"]["grade"] in {"A", "B", "C", "D", "F"}
    assert (report["score"]["scoring_version"], report["score"]["provisional"]) == ("1.0.0", False)
    assert report["target"] == {"base_url": plan.base_url, "model": "demo"}


def test_every_request_keeps_its_named_timestamps_in_order():
    _, m = _scan(TargetConfig(**FAST), levels=(1,), requests=3)
    for r in m.levels[0].requests:
        assert (r.scheduled_at <= r.sent_at <= r.body_written_at <= r.headers_at
                <= r.first_output_at <= r.last_output_at <= r.done_at <= r.ended_at)
        assert len(r.output_times) == 12 and r.completion_tokens == 12


def test_a_server_without_usage_fails_usage_and_falls_back_to_a_chunk_rate():
    plan, m = _scan(TargetConfig(**FAST, usage=False))
    report = report_from_measurement(plan, m)
    validate_report(report)
    checks = {c["id"]: c for c in report["checks"]}
    assert checks["usage_reported_share"]["value"] == 0.0
    assert checks["usage_reported_share"]["status"] == "fail"
    assert checks["generation_rate_load_ratio"]["basis"] == "chunks"
    assert report["measurements"]["cost_per_1000_requests"] is None
    assert "usage" in report["measurements"]["cost_reason"] or "prices" in \
        report["measurements"]["cost_reason"]


def test_a_target_without_metrics_warns_on_the_metrics_check():
    plan, m = _scan(TargetConfig(**FAST, metrics=False), levels=(1,), requests=2)
    report = report_from_measurement(plan, m)
    checks = {c["id"]: c for c in report["checks"]}
    assert checks["metrics_endpoint"]["value"] is False
    assert checks["metrics_endpoint"]["status"] == "warn"


def test_cost_per_1000_requests_comes_from_measured_usage_and_prices():
    from decimal import Decimal

    plan, m = _scan(TargetConfig(**FAST), levels=(1,), requests=3,
                    price_input_per_mtok=Decimal("0.50"), price_output_per_mtok=Decimal("1.50"))
    records = m.levels[0].requests
    expected = sum(Decimal(r.prompt_tokens) * Decimal("0.50")
                   + Decimal(r.completion_tokens) * Decimal("1.50") for r in records)
    expected = expected / Decimal(1_000_000) / 3 * 1000
    assert m.cost.usd_per_1000_requests == expected
    report = report_from_measurement(plan, m)
    validate_report(report)
    assert report["measurements"]["cost_per_1000_requests"] == float(round(expected, 6))


def test_a_client_bound_level_makes_the_load_ratios_insufficient():
    with running_target(TargetConfig(**FAST)) as (host, port):
        plan = ScanPlan(base_url=f"http://{host}:{port}/v1", model="demo", levels=(1, 4),
                        requests=4)
        m = run_scan(plan, lag_threshold_ms=-1.0)  # any lag at all counts as falling behind
    assert all(level.client_bound for level in m.levels)
    values = check_values(m)
    for check_id in ("ttft_p99_load_ratio", "generation_rate_load_ratio"):
        assert values[check_id].value is None
        assert values[check_id].reason.startswith("client_bound")
    report = report_from_measurement(plan, m)
    validate_report(report)
    assert all(level["client_bound"] for level in report["levels"])


def test_errors_from_the_target_are_counted_and_capped():
    plan, m = _scan(TargetConfig(**FAST, error_rate=1.0, seed=1), levels=(1, 2), requests=3)
    report = report_from_measurement(plan, m)
    validate_report(report)
    assert report["levels"][0]["failed"] == {"http_status_500": 3}
    assert {cap["id"] for cap in report["score"]["caps_applied"]} >= {"no_successful_request"}
    assert report["score"]["grade"] == "F"


def test_a_target_with_a_role_chunk_and_a_slot_limit_still_streams_every_reply():
    plan, m = _scan(TargetConfig(**FAST, role_chunk=True, max_concurrency=2))
    assert all(level.failed_by_class == {} for level in m.levels)
    assert all(len(r.output_times) == 12 for r in m.all_requests)


def test_the_html_report_is_self_contained():
    plan, m = _scan(TargetConfig(**FAST))
    report = report_from_measurement(plan, m)
    html = render_html(report)
    assert html.lstrip().startswith("<!DOCTYPE html>")
    assert "<svg" in html and "Scoring 1.0.0" in html and "Provisional" not in html
    assert "Provisional scoring 0.9.0" in render_html(regrade(report, "0.9.0"))
    for check in report["checks"]:
        assert check["id"] in html
    # No network: nothing is loaded from anywhere.
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)
    assert "@import" not in html and "<script" not in html


def test_regrade_of_a_report_reproduces_its_score_and_follows_a_changed_value():
    plan, m = _scan(TargetConfig(**FAST))
    report = report_from_measurement(plan, m)
    again = regrade(report)
    validate_report(again)
    assert again["checks"] == report["checks"] and again["score"] == report["score"]
    edited = dict(report, checks=[dict(c) for c in report["checks"]])
    for check in edited["checks"]:
        if check["id"] == "ttft_p95_at_concurrency_1":
            check["value"] = 5000.0
    regraded = regrade(edited)
    status = {c["id"]: c["status"] for c in regraded["checks"]}
    assert status["ttft_p95_at_concurrency_1"] == "fail"
    assert {"id": "ttft_at_concurrency_1_failed", "grade_at_best": "C"} in \
        regraded["score"]["caps_applied"]
