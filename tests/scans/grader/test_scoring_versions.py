"""Scoring 1.0.0 (calibrated) beside 0.9.0: bounds that follow the prompt, the rules the
calibration must keep, and old grades reproduced exactly by `tokvera regrade`."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scans.grader import scoring
from scans.grader.report import regrade
from scans.grader.scoring import CheckValue, grade
from scans.grader.scoring_rules import RULES
from tokvera_site import cli

HEALTHY = {
    "ttft_p95_at_concurrency_1": CheckValue(300.0, input_tokens=100),
    "ttft_p99_load_ratio": CheckValue(1.5, input_tokens=100, loaded_p99_ms=450.0),
    "inter_chunk_p95_at_concurrency_1": CheckValue(30.0),
    "error_rate": CheckValue(0.0),
    "error_rate_at_peak": CheckValue(0.0),
    "generation_rate_load_ratio": CheckValue(0.9, basis="tokens"),
    "usage_reported_share": CheckValue(1.0),
    "metrics_endpoint": CheckValue(True),
    "repeat_prompt_share": CheckValue(None, "no sample"),
    "gpu_utilization_at_peak": CheckValue(None, "no GPU reading"),
}


def entry(graded: scoring.Graded, check_id: str) -> dict:
    return next(e for e in graded.checks if e["id"] == check_id)


def test_the_current_version_is_1_0_0_and_not_provisional():
    score = grade(HEALTHY).score
    assert (score["scoring_version"], score["provisional"]) == ("1.0.0", False)
    assert scoring.SCORING_VERSIONS == ("0.9.0", "1.0.0")
    assert grade(HEALTHY, "0.9.0").score["provisional"] is True


def test_an_unknown_version_is_refused_by_name():
    with pytest.raises(ValueError, match=r"unknown scoring version '2\.0\.0'.*0\.9\.0, 1\.0\.0"):
        grade(HEALTHY, "2.0.0")


@pytest.mark.parametrize(("input_tokens", "pass_bound", "warn_bound"), [
    (None, 500, 2000),      # a server that states no usage: the base bounds
    (100, 510, 2050),       # a chat turn
    (4000, 900, 4000),      # the rag preset
    (10000, 1500, 7000),    # the long preset
])
def test_time_to_first_token_bounds_grow_with_the_prompt(input_tokens, pass_bound, warn_bound):
    values = {**HEALTHY, "ttft_p95_at_concurrency_1": CheckValue(pass_bound,
                                                                 input_tokens=input_tokens)}
    ttft = entry(grade(values), "ttft_p95_at_concurrency_1")
    assert (ttft["pass"]["value"], ttft["warn"]["value"]) == (pass_bound, warn_bound)
    assert ttft["status"] == "pass"  # inclusive at the bound it states
    assert ttft.get("input_tokens") == input_tokens
    over = {**HEALTHY, "ttft_p95_at_concurrency_1": CheckValue(warn_bound + 0.1,
                                                               input_tokens=input_tokens)}
    assert entry(grade(over), "ttft_p95_at_concurrency_1")["status"] == "fail"


def test_under_0_9_0_the_prompt_length_changes_nothing():
    long_prompt = {**HEALTHY, "ttft_p95_at_concurrency_1": CheckValue(900.0, input_tokens=4000)}
    ttft = entry(grade(long_prompt, "0.9.0"), "ttft_p95_at_concurrency_1")
    assert (ttft["pass"]["value"], ttft["warn"]["value"], ttft["status"]) == (800, 2000, "warn")
    assert "input_tokens" not in ttft


@given(ttft_p99=st.floats(1, 500), alone_p99=st.floats(1, 500), gap_p95=st.floats(0, 40),
       input_tokens=st.one_of(st.none(), st.floats(0, 20000)))
def test_a_result_within_mlperf_interactive_limits_is_never_worse_than_warn_on_latency(
        ttft_p99, alone_p99, gap_p95, input_tokens):
    # MLPerf Inference's interactive scenarios: TTFT p99 <= 450-500 ms and TPOT <= 30-40 ms
    # at their tested load; a p95 is at most the p99, a token-per-chunk gap about the TPOT.
    alone = min(alone_p99, ttft_p99)
    values = {**HEALTHY,
              "ttft_p95_at_concurrency_1": CheckValue(alone, input_tokens=input_tokens),
              "ttft_p99_load_ratio": CheckValue(ttft_p99 / alone, input_tokens=input_tokens,
                                                loaded_p99_ms=ttft_p99),
              "inter_chunk_p95_at_concurrency_1": CheckValue(gap_p95)}
    graded = grade(values)
    for e in graded.checks:
        if e["pillar"] == "latency":
            assert e["status"] in {"pass", "warn"}, e
    assert not graded.score["caps_applied"]


def test_a_fast_server_slowed_fourfold_is_not_failed_for_it_but_a_slow_one_is():
    fast = {**HEALTHY, "ttft_p99_load_ratio": CheckValue(6.0, input_tokens=100,
                                                         loaded_p99_ms=480.0)}
    ratio = entry(grade(fast), "ttft_p99_load_ratio")
    assert ratio["status"] == "pass"
    assert ratio["loaded_within"] == {"check": "ttft_p95_at_concurrency_1", "pass": 510.0,
                                      "warn": 2050.0}
    assert entry(grade(fast, "0.9.0"), "ttft_p99_load_ratio")["status"] == "fail"
    slow = {**HEALTHY, "ttft_p99_load_ratio": CheckValue(6.0, input_tokens=100,
                                                         loaded_p99_ms=6000.0)}
    graded = grade(slow)
    assert entry(graded, "ttft_p99_load_ratio")["status"] == "fail"
    assert "ttft_collapses_under_load" in [c["id"] for c in graded.score["caps_applied"]]


def test_a_two_thread_cpu_server_with_4000_token_prompts_fails_time_to_first_token():
    # What a 2-thread CPU llama.cpp server measured at the rag preset (docs/calibration.md).
    values = {**HEALTHY, "ttft_p95_at_concurrency_1": CheckValue(25_000.0, input_tokens=4000)}
    graded = grade(values)
    assert entry(graded, "ttft_p95_at_concurrency_1")["status"] == "fail"
    assert "ttft_at_concurrency_1_failed" in [c["id"] for c in graded.score["caps_applied"]]


def test_the_checks_and_figures_calibration_did_not_touch_carry_over_exactly():
    old, new = RULES["0.9.0"], RULES["1.0.0"]
    assert [c.id for c in old.checks] == [c.id for c in new.checks]
    assert (old.pillar_weights, old.bands) == (new.pillar_weights, new.bands)
    assert [(c.id, c.grade_at_best) for c in old.caps] == [(c.id, c.grade_at_best)
                                                           for c in new.caps]
    changed = {c.id for c, d in zip(old.checks, new.checks, strict=True)
               if (c.pass_value, c.warn_value, c.per_1k_input_tokens, c.loaded_within)
               != (d.pass_value, d.warn_value, d.per_1k_input_tokens, d.loaded_within)}
    assert changed == {"ttft_p95_at_concurrency_1", "inter_chunk_p95_at_concurrency_1",
                       "ttft_p99_load_ratio"}


def _report_graded_by_0_9_0() -> dict:
    """A report as scoring 0.9.0 wrote it (no input_tokens in its entries)."""
    values = {**HEALTHY,
              "ttft_p95_at_concurrency_1": CheckValue(850.0),
              "ttft_p99_load_ratio": CheckValue(3.0),
              "inter_chunk_p95_at_concurrency_1": CheckValue(120.0)}
    graded = grade(values, "0.9.0")
    return {"tool_version": "0.9.0", "target": {"base_url": "http://127.0.0.1:9/v1",
                                                "model": "m"},
            "levels": [{"concurrency": 1, "prompt_tokens": {"p50": 2000, "min": 2000,
                                                            "max": 2000, "n": 8},
                        "ttft_ms": {"p50": 700.0, "p95": 850.0, "p99": 900.0}},
                       {"concurrency": 4, "ttft_ms": {"p99": 2700.0}}],
            "checks": graded.checks, "score": graded.score, "measurements": {}}


def test_regrading_a_0_9_0_report_under_0_9_0_reproduces_it_exactly():
    report = _report_graded_by_0_9_0()
    again = regrade(report, "0.9.0")
    assert again["checks"] == report["checks"]
    assert again["score"] == report["score"]


def test_regrading_a_0_9_0_report_under_1_0_0_reads_the_prompt_length_from_its_levels():
    report = _report_graded_by_0_9_0()
    assert report["score"]["grade"] == "B"  # TTFT 850, ratio 3 and gap 120 all warn
    new = regrade(report)
    ttft = entry(scoring.Graded(new["checks"], new["score"]), "ttft_p95_at_concurrency_1")
    assert ttft["input_tokens"] == 2000.0
    assert (ttft["pass"]["value"], ttft["status"]) == (700.0, "warn")
    ratio = entry(scoring.Graded(new["checks"], new["score"]), "ttft_p99_load_ratio")
    assert ratio["loaded_p99_ms"] == pytest.approx(2700.0)
    assert new["score"]["scoring_version"] == "1.0.0"
    assert new["measurements"]["regraded_from_scoring_version"] == "0.9.0"


def test_tokvera_regrade_takes_the_version_and_says_both(tmp_path, capsys):
    path = tmp_path / "report.json"
    path.write_text(json.dumps(_report_graded_by_0_9_0()), encoding="utf-8")
    assert cli.main(["regrade", str(path), "--scoring-version", "0.9.0", "--json", "-"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["score"] == _report_graded_by_0_9_0()["score"]
    assert cli.main(["regrade", str(path)]) == 0
    line = capsys.readouterr().out
    assert "under scoring 1.0.0; was B under scoring 0.9.0" in line
    with pytest.raises(SystemExit):
        cli.main(["regrade", str(path), "--scoring-version", "0.8.0"])
    assert "invalid choice: '0.8.0'" in capsys.readouterr().err
