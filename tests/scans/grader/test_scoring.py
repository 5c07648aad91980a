"""Scoring 0.9.0, the scoring specification's provisional table, graded exactly as it was
published: every test here grades under "0.9.0" (1.0.0 re-grades; 0.9.0 stays reproducible).
1.0.0's own rules are in test_scoring_versions.py."""

import functools
import math
from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scans.grader import scoring
from scans.grader.scoring import GRADES, CheckValue, values_from_checks
from scans.grader.scoring_rules import RULES

V090 = RULES["0.9.0"]
CHECKS = V090.checks
grade = functools.partial(scoring.grade, version="0.9.0")

HEALTHY = {
    "ttft_p95_at_concurrency_1": 300.0,
    "ttft_p99_load_ratio": 1.5,
    "inter_chunk_p95_at_concurrency_1": 40.0,
    "error_rate": 0.0,
    "error_rate_at_peak": 0.0,
    "generation_rate_load_ratio": 0.9,
    "usage_reported_share": 1.0,
    "metrics_endpoint": True,
    "repeat_prompt_share": 0.02,
    "gpu_utilization_at_peak": 0.8,
}


def values(**overrides):
    """Check values for a healthy endpoint, with some replaced (None: not measured)."""
    merged = {**HEALTHY, **overrides}
    return {check_id: CheckValue(value, reason=None if value is not None else "test: not measured")
            for check_id, value in merged.items()}


def statuses(graded):
    return {entry["id"]: entry["status"] for entry in graded.checks}


def cap_ids(graded):
    return [cap["id"] for cap in graded.score["caps_applied"]]


# --- version ----------------------------------------------------------------------------------

def test_0_9_0_is_still_graded_and_says_it_is_provisional():
    assert V090.provisional is True
    score = grade(values()).score
    assert score["scoring_version"] == "0.9.0"
    assert score["provisional"] is True


# --- the rules as published --------------------------------------------------------------------

def test_checks_are_the_spec_checks_in_table_order():
    assert [(c.id, c.pillar, c.op, c.pass_value, c.warn_value, c.counted) for c in CHECKS] == [
        ("ttft_p95_at_concurrency_1", "latency", "<=", 800, 2000, True),
        ("ttft_p99_load_ratio", "latency", "<=", 2, 4, True),
        ("inter_chunk_p95_at_concurrency_1", "latency", "<=", 100, 250, True),
        ("error_rate", "reliability", "<=", 0.01, 0.05, True),
        ("error_rate_at_peak", "reliability", "<=", 0.01, 0.05, True),
        ("generation_rate_load_ratio", "capacity", ">=", 0.7, 0.4, True),
        ("usage_reported_share", "observability", ">=", 1, 0.5, True),
        ("metrics_endpoint", "observability", "==", True, False, True),
        ("repeat_prompt_share", "cost_and_cache", "<=", 0.1, 0.25, True),
        ("gpu_utilization_at_peak", "capacity", ">=", 0.6, 0.3, False),
    ]


def test_pillar_weights_bands_and_caps_are_the_spec_ones():
    assert V090.pillar_weights == {"latency": 35, "reliability": 30, "capacity": 15,
                                      "observability": 10, "cost_and_cache": 10}
    assert V090.bands == (("A", 90), ("B", 80), ("C", 70), ("D", 60), ("F", 0))
    assert [(cap.id, cap.grade_at_best) for cap in V090.caps] == [
        ("no_successful_request", "F"),
        ("error_rate_over_25_percent", "F"),
        ("error_rate_over_5_percent", "D"),
        ("ttft_at_concurrency_1_failed", "C"),
        ("ttft_collapses_under_load", "C"),
    ]


def test_each_check_entry_has_the_report_fields():
    graded = grade(values(generation_rate_load_ratio=None))
    ttft = graded.checks[0]
    assert ttft == {
        "id": "ttft_p95_at_concurrency_1", "pillar": "latency",
        "measures": V090.check("ttft_p95_at_concurrency_1").measures,
        "value": 300.0, "unit": "ms",
        "pass": {"op": "<=", "value": 800}, "warn": {"op": "<=", "value": 2000},
        "status": "pass", "counted": True,
    }
    rate = graded.checks[5]
    assert rate["status"] == "insufficient_evidence"
    assert rate["counted"] is False
    assert rate["value"] is None
    assert rate["reason"] == "test: not measured"


def test_basis_is_reported_where_one_is_given():
    given_values = values()
    given_values["generation_rate_load_ratio"] = CheckValue(0.5, basis="chunks")
    entry = grade(given_values).checks[5]
    assert entry["basis"] == "chunks"
    assert entry["status"] == "warn"
    assert "basis" not in grade(values()).checks[5]


def test_a_missing_check_is_insufficient_evidence_not_measured():
    given_values = values()
    del given_values["repeat_prompt_share"]
    graded = grade(given_values)
    assert statuses(graded)["repeat_prompt_share"] == "insufficient_evidence"
    assert {"id": "repeat_prompt_share", "reason": "not measured"} in graded.score["not_counted"]


def test_an_unknown_check_id_is_refused():
    with pytest.raises(ValueError, match="unknown check"):
        grade({**values(), "ttft_p50": CheckValue(1.0)})


def test_a_value_of_the_wrong_type_is_refused():
    with pytest.raises(ValueError):
        grade(values(metrics_endpoint=1))
    with pytest.raises(ValueError):
        grade(values(error_rate=True))
    with pytest.raises(ValueError):
        grade(values(error_rate=float("nan")))


# --- statuses -----------------------------------------------------------------------------------

@pytest.mark.parametrize(("check_id", "value", "expected"), [
    ("ttft_p95_at_concurrency_1", 800, "pass"),
    ("ttft_p95_at_concurrency_1", 800.001, "warn"),
    ("ttft_p95_at_concurrency_1", 2000, "warn"),
    ("ttft_p95_at_concurrency_1", 2000.001, "fail"),
    ("error_rate", 0.01, "pass"),
    ("error_rate", 0.05, "warn"),
    ("error_rate", 0.0501, "fail"),
    ("generation_rate_load_ratio", 0.7, "pass"),
    ("generation_rate_load_ratio", 0.4, "warn"),
    ("generation_rate_load_ratio", 0.3999, "fail"),
    ("usage_reported_share", 1, "pass"),
    ("usage_reported_share", 0.5, "warn"),
    ("usage_reported_share", 0, "fail"),
    ("repeat_prompt_share", 0.25, "warn"),
])
def test_bounds_are_inclusive(check_id, value, expected):
    assert statuses(grade(values(**{check_id: value})))[check_id] == expected


def test_metrics_endpoint_present_passes_and_absent_warns():
    present = grade(values(metrics_endpoint=True)).checks[7]
    absent = grade(values(metrics_endpoint=False)).checks[7]
    assert (present["status"], absent["status"]) == ("pass", "warn")
    assert present["pass"] == {"op": "==", "value": True}
    assert present["warn"] == {"op": "==", "value": False}
    assert absent["value"] is False


@given(st.one_of(st.booleans(), st.none()))
def test_metrics_endpoint_can_never_fail(present):
    assert statuses(grade(values(metrics_endpoint=present)))["metrics_endpoint"] != "fail"


# --- preview ------------------------------------------------------------------------------------

def test_gpu_utilization_is_reported_as_preview_with_its_value_and_never_counted():
    graded = grade(values(gpu_utilization_at_peak=0.1))
    gpu = graded.checks[-1]
    assert gpu["status"] == "preview"
    assert gpu["counted"] is False
    assert gpu["value"] == 0.1
    assert gpu["reason"]
    assert "gpu_utilization_at_peak" in [entry["id"] for entry in graded.score["not_counted"]]


def test_gpu_utilization_without_a_source_keeps_its_reason():
    given_values = values()
    given_values["gpu_utilization_at_peak"] = CheckValue(None, "no GPU utilization source")
    gpu = grade(given_values).checks[-1]
    assert (gpu["status"], gpu["value"], gpu["reason"]) == (
        "preview", None, "no GPU utilization source")


@given(st.one_of(st.none(), st.floats(min_value=0, max_value=1)))
def test_a_preview_value_never_changes_the_score(gpu):
    with_gpu = grade(values(gpu_utilization_at_peak=gpu)).score
    baseline = grade(values()).score
    assert {k: v for k, v in with_gpu.items() if k != "not_counted"} == {
        k: v for k, v in baseline.items() if k != "not_counted"}


# --- points, rounding, renormalization -----------------------------------------------------------

def test_a_healthy_endpoint_scores_100_and_an_a():
    score = grade(values()).score
    assert (score["points"], score["grade"], score["uncapped_grade"]) == (100.0, "A", "A")
    assert score["caps_applied"] == []
    assert score["effective_weight"] == {"latency": 0.35, "reliability": 0.3, "capacity": 0.15,
                                         "observability": 0.1, "cost_and_cache": 0.1}
    assert score["not_counted"] == [{"id": "gpu_utilization_at_peak",
                                     "reason": grade(values()).checks[-1]["reason"]}]


def test_a_pillar_scores_the_mean_of_its_checks():
    score = grade(values(ttft_p99_load_ratio=3, inter_chunk_p95_at_concurrency_1=300)).score
    assert score["pillar_points"]["latency"] == pytest.approx(50.0)  # pass, warn, fail
    score = grade(values(inter_chunk_p95_at_concurrency_1=120)).score
    assert score["pillar_points"]["latency"] == pytest.approx(250 / 3)


def test_points_round_half_up_to_one_decimal():
    assert scoring.round_points(Fraction(8625, 100)) == Decimal("86.3")
    assert scoring.round_points(Fraction(8624, 100)) == Decimal("86.2")
    assert scoring.round_points(Fraction(8995, 100)) == Decimal("90.0")
    assert scoring.round_points(Fraction(250, 3)) == Decimal("83.3")
    assert scoring.round_points(Fraction(0)) == Decimal("0.0")
    assert scoring.round_points(Fraction(100)) == Decimal("100.0")


def test_a_weighted_mean_of_exactly_81_25_is_reported_as_81_3():
    # latency 100 × 35, reliability 100 × 30, capacity 0 × 15 over 80: exactly 81.25.
    # (Python's round(81.25, 1) would give 81.2.)
    graded = grade({check_id: CheckValue(value) for check_id, value in {
        "ttft_p95_at_concurrency_1": 100.0, "ttft_p99_load_ratio": 1.0,
        "inter_chunk_p95_at_concurrency_1": 10.0, "error_rate": 0.0, "error_rate_at_peak": 0.0,
        "generation_rate_load_ratio": 0.1}.items()})
    assert graded.score["points"] == 81.3
    assert graded.score["grade"] == "B"


def test_the_band_is_read_from_the_rounded_points():
    assert scoring.band(scoring.round_points(Fraction(8996, 100))) == "A"
    assert scoring.band(Decimal("89.9")) == "B"
    assert scoring.band(Decimal("60.0")) == "D"
    assert scoring.band(Decimal("59.9")) == "F"


def test_weights_are_renormalized_over_the_graded_pillars():
    score = grade(values(generation_rate_load_ratio=None, usage_reported_share=None,
                         metrics_endpoint=None, repeat_prompt_share=None,
                         error_rate_at_peak=0.03)).score
    assert score["effective_weight"] == pytest.approx({"latency": 35 / 65,
                                                       "reliability": 30 / 65})
    assert score["pillar_points"] == {"latency": 100.0, "reliability": 75.0}
    # (35 × 100 + 30 × 75) / 65 = 88.46…
    assert score["points"] == 88.5
    assert score["grade"] == "B"


# --- caps ---------------------------------------------------------------------------------------

def test_no_successful_request_caps_at_f():
    graded = grade(values(error_rate=1.0, error_rate_at_peak=1.0,
                          ttft_p95_at_concurrency_1=None, ttft_p99_load_ratio=None,
                          inter_chunk_p95_at_concurrency_1=None,
                          generation_rate_load_ratio=None, usage_reported_share=None))
    assert cap_ids(graded) == ["no_successful_request", "error_rate_over_25_percent",
                               "error_rate_over_5_percent"]
    assert graded.score["grade"] == "F"


def test_no_successful_request_does_not_apply_when_any_request_succeeded():
    graded = grade(values(error_rate=0.99, error_rate_at_peak=1.0))
    assert "no_successful_request" not in cap_ids(graded)


def test_no_successful_request_binds_even_when_points_would_be_high():
    # Only the checks that need no success are measured: reliability fails, observability
    # passes. The cap is what decides the letter here.
    graded = grade({"error_rate": CheckValue(1.0), "error_rate_at_peak": CheckValue(1.0),
                    "metrics_endpoint": CheckValue(True),
                    "repeat_prompt_share": CheckValue(0.0)})
    assert graded.score["grade"] == "F"
    assert graded.score["caps_applied"][0] == {"id": "no_successful_request",
                                               "grade_at_best": "F"}


def test_an_error_rate_over_25_percent_caps_at_f():
    graded = grade(values(error_rate=0.26))
    assert cap_ids(graded) == ["error_rate_over_25_percent", "error_rate_over_5_percent"]
    assert graded.score["uncapped_grade"] == "B"  # 85 points
    assert graded.score["grade"] == "F"


def test_an_error_rate_of_exactly_25_percent_only_trips_the_5_percent_cap():
    assert cap_ids(grade(values(error_rate=0.25))) == ["error_rate_over_5_percent"]


def test_an_error_rate_over_5_percent_caps_at_d():
    graded = grade(values(error_rate=0.06))
    assert graded.score["caps_applied"] == [{"id": "error_rate_over_5_percent",
                                             "grade_at_best": "D"}]
    assert (graded.score["points"], graded.score["uncapped_grade"]) == (85.0, "B")
    assert graded.score["grade"] == "D"


def test_an_error_rate_of_exactly_5_percent_trips_no_cap():
    graded = grade(values(error_rate=0.05))
    assert graded.score["caps_applied"] == []
    assert graded.score["grade"] == "A"  # 92.5 points


def test_ttft_failing_at_concurrency_1_caps_at_c():
    graded = grade(values(ttft_p95_at_concurrency_1=2500.0))
    assert cap_ids(graded) == ["ttft_at_concurrency_1_failed"]
    assert graded.score["uncapped_grade"] == "B"  # 88.3 points
    assert graded.score["grade"] == "C"


def test_ttft_collapsing_under_load_caps_at_c():
    graded = grade(values(ttft_p99_load_ratio=4.5))
    assert cap_ids(graded) == ["ttft_collapses_under_load"]
    assert graded.score["grade"] == "C"


def test_a_warning_ttft_triggers_no_cap():
    assert cap_ids(grade(values(ttft_p95_at_concurrency_1=1500.0, ttft_p99_load_ratio=3))) == []


def test_an_insufficient_check_triggers_no_cap():
    graded = grade(values(ttft_p95_at_concurrency_1=None, ttft_p99_load_ratio=None,
                          error_rate=None))
    assert graded.score["caps_applied"] == []
    assert graded.score["grade"] == "A"


def test_a_cap_that_does_not_bind_is_still_listed():
    graded = grade(values(error_rate=0.3, error_rate_at_peak=0.3, ttft_p95_at_concurrency_1=3000,
                          ttft_p99_load_ratio=10, inter_chunk_p95_at_concurrency_1=400,
                          generation_rate_load_ratio=0.1, usage_reported_share=0,
                          metrics_endpoint=False, repeat_prompt_share=0.5))
    assert graded.score["uncapped_grade"] == "F"
    assert graded.score["grade"] == "F"
    assert cap_ids(graded) == ["error_rate_over_25_percent", "error_rate_over_5_percent",
                               "ttft_at_concurrency_1_failed", "ttft_collapses_under_load"]


# --- no letter -----------------------------------------------------------------------------------

def test_no_letter_without_a_graded_reliability_check():
    score = grade(values(error_rate=None, error_rate_at_peak=None)).score
    assert score["grade"] == "insufficient_evidence"
    assert "reliability" in score["reason"]
    assert score["points"] is None
    assert score["uncapped_grade"] is None
    assert score["effective_weight"] == {}


def test_no_letter_with_only_one_graded_pillar():
    score = grade({"error_rate": CheckValue(0.0), "error_rate_at_peak": CheckValue(0.0)}).score
    assert score["grade"] == "insufficient_evidence"
    assert "two" in score["reason"]
    assert (score["points"], score["uncapped_grade"]) == (None, None)
    assert score["pillar_points"] == {"reliability": 100.0}


def test_no_letter_when_nothing_was_measured():
    score = grade({}).score
    assert score["grade"] == "insufficient_evidence"
    assert len(score["not_counted"]) == len(CHECKS)


def test_a_letter_with_reliability_and_one_other_pillar():
    score = grade({"error_rate": CheckValue(0.0), "error_rate_at_peak": CheckValue(0.0),
                   "metrics_endpoint": CheckValue(False)}).score
    assert score["grade"] == "B"  # (30 × 100 + 10 × 50) / 40 = 87.5
    assert score["points"] == 87.5


def test_a_result_with_no_letter_is_below_every_floor():
    assert scoring.is_below_floor("insufficient_evidence", "F")
    assert scoring.is_below_floor("C", "B")
    assert not scoring.is_below_floor("B", "B")
    assert not scoring.is_below_floor("A", "C")
    with pytest.raises(ValueError):
        scoring.is_below_floor("A", "E")


# --- re-grading ---------------------------------------------------------------------------------

def test_regrading_the_reported_checks_gives_the_same_result():
    given_values = values(error_rate=0.07, inter_chunk_p95_at_concurrency_1=None)
    given_values["generation_rate_load_ratio"] = CheckValue(0.5, basis="chunks")
    first = grade(given_values)
    again = grade(values_from_checks(first.checks))
    assert again == first


# --- properties ---------------------------------------------------------------------------------

def _value_strategy(check):
    if check.op == "==":
        return st.booleans()
    if check.unit == "share":
        return st.sampled_from([0.0, 0.01, 0.05, 0.1, 0.25, 0.3, 0.5, 0.6, 1.0]) | st.floats(0, 1)
    if check.unit == "ratio":
        return st.floats(min_value=0, max_value=20)
    return st.floats(min_value=0, max_value=10_000)


check_values = st.fixed_dictionaries({}, optional={
    check.id: st.one_of(
        st.builds(CheckValue, _value_strategy(check)),
        st.builds(CheckValue, st.none(), st.sampled_from(["no successes", "client_bound"])),
    ) for check in CHECKS
})


@given(check_values)
def test_a_cap_never_raises_a_grade(given_values):
    score = grade(given_values).score
    if score["grade"] == "insufficient_evidence":
        return
    assert GRADES.index(score["grade"]) >= GRADES.index(score["uncapped_grade"])
    caps = [cap["grade_at_best"] for cap in score["caps_applied"]]
    assert score["grade"] == max([score["uncapped_grade"], *caps], key=GRADES.index)


@given(check_values)
def test_effective_weights_sum_to_one_over_the_graded_pillars(given_values):
    score = grade(given_values).score
    if score["grade"] == "insufficient_evidence":
        assert score["effective_weight"] == {}
        return
    assert math.isclose(math.fsum(score["effective_weight"].values()), 1.0, rel_tol=1e-12)
    assert set(score["effective_weight"]) == set(score["pillar_points"])


@given(check_values)
def test_points_lie_between_0_and_100(given_values):
    score = grade(given_values).score
    if score["points"] is not None:
        assert 0 <= score["points"] <= 100
        assert score["points"] == round(score["points"], 1)
    for points in score["pillar_points"].values():
        assert 0 <= points <= 100


@given(check_values, st.data())
def test_removing_an_insufficient_check_never_changes_other_checks_statuses(given_values, data):
    insufficient = [check_id for check_id, value in given_values.items() if value.value is None]
    if not insufficient:
        return
    removed = data.draw(st.sampled_from(insufficient))
    before = statuses(grade(given_values))
    after = statuses(grade({k: v for k, v in given_values.items() if k != removed}))
    assert {k: v for k, v in after.items() if k != removed} == {
        k: v for k, v in before.items() if k != removed}
    assert after[removed] == before[removed]  # still insufficient_evidence (or preview)


@given(check_values)
def test_removing_an_insufficient_check_never_changes_the_score_but_its_reason(given_values):
    insufficient = [check_id for check_id, value in given_values.items() if value.value is None]
    for removed in insufficient:
        before = grade(given_values).score
        after = grade({k: v for k, v in given_values.items() if k != removed}).score
        assert {k: v for k, v in after.items() if k != "not_counted"} == {
            k: v for k, v in before.items() if k != "not_counted"}


@given(check_values)
def test_regrading_is_idempotent(given_values):
    first = grade(given_values)
    assert grade(values_from_checks(first.checks)) == first
