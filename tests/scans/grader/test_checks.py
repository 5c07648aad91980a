"""Check values from measurements built record by record (the rules of issue 3)."""

from __future__ import annotations

from array import array
from decimal import Decimal

from scans.grader.check_values import check_values, generation_rate_basis
from scans.grader.measurement import (
    CostFigure,
    GpuReading,
    LevelResult,
    Measurement,
    MetricsProbe,
    RequestRecord,
)
from scans.grader.probes import cost_per_1000_requests
from scans.grader.prompts import load_prompts_file


def _record(level: int, ttft_ms: float | None = 100.0, chunks: int = 3, gap_ms: float = 10.0,
            tokens: int | None = None, failure: str | None = None) -> RequestRecord:
    r = RequestRecord(level=level, index=0, scheduled_at=0.0, sent_at=0.0, body_written_at=0.0)
    if failure:
        r.failure = failure
        return r
    start = ttft_ms / 1000.0
    r.output_times = array("d", [start + i * gap_ms / 1000.0 for i in range(chunks)])
    r.first_output_at, r.last_output_at = r.output_times[0], r.output_times[-1]
    r.first_answer_at = r.first_output_at
    r.answer_chunks = chunks
    r.completion_tokens = tokens
    return r


def _measurement(*levels: tuple[int, list[RequestRecord]], lag: float = 0.0) -> Measurement:
    results = [LevelResult(c, records, loop_lag_ms=array("d", [lag]), loop_lag_threshold_ms=20)
               for c, records in levels]
    return Measurement(
        base_url="http://127.0.0.1:1/v1", model="m", started_at="", finished_at="",
        levels=results, metrics=MetricsProbe("", False, "absent"),
        gpu=GpuReading(None, None, "no GPU source"), cost=CostFigure(None, "no prices"),
        loop_lag_threshold_ms=20, origin_time=0.0)


def test_ttft_percentiles_are_nearest_rank_never_interpolated():
    m = _measurement((1, [_record(1, 100.0), _record(1, 300.0)]))
    values = check_values(m)
    assert values["ttft_p95_at_concurrency_1"].value == 300.0  # interpolation would say 290
    from scans.grader.report import _level_dict

    level = _level_dict(m.levels[0], "chunks", 0.0)
    assert level["ttft_ms"]["p50"] == 100.0 and level["ttft_ms"]["p99"] == 300.0


def test_the_load_ratio_reads_the_highest_level_that_had_a_success():
    m = _measurement((1, [_record(1, 100.0)]), (4, [_record(4, 250.0)]),
                     (16, [_record(16, failure="timeout")]))
    values = check_values(m)
    assert values["ttft_p99_load_ratio"].value == 2.5
    assert values["error_rate_at_peak"].value == 1.0   # the highest configured level
    assert values["error_rate"].value == 1 / 3


def test_ratios_are_insufficient_when_only_concurrency_1_succeeded():
    m = _measurement((1, [_record(1)]), (4, [_record(4, failure="timeout")]))
    values = check_values(m)
    for check_id in ("ttft_p99_load_ratio", "generation_rate_load_ratio"):
        assert values[check_id].value is None
        assert "concurrency 1" in values[check_id].reason


def test_ratios_are_insufficient_for_a_one_level_scan():
    values = check_values(_measurement((1, [_record(1)])))
    assert "one level" in values["ttft_p99_load_ratio"].reason


def test_generation_rate_uses_tokens_only_when_every_compared_stream_reported_usage():
    all_usage = _measurement((1, [_record(1, chunks=5, tokens=10)]),
                             (4, [_record(4, chunks=5, tokens=10)]))
    assert generation_rate_basis(all_usage) == "tokens"
    one_missing = _measurement((1, [_record(1, chunks=5, tokens=10)]),
                               (4, [_record(4, chunks=5, tokens=10), _record(4, chunks=5)]))
    assert generation_rate_basis(one_missing) == "chunks"
    assert check_values(one_missing)["generation_rate_load_ratio"].basis == "chunks"


def test_a_stream_with_fewer_than_two_units_has_no_rate():
    record = _record(1, chunks=1, tokens=1)
    assert record.rate("tokens") is None and record.rate("chunks") is None
    assert abs(_record(1, chunks=3, gap_ms=10.0).rate("chunks") - 100.0) < 1e-6


def test_usage_share_counts_succeeded_streams_only_and_never_excuses_a_server():
    m = _measurement((1, [_record(1, tokens=3), _record(1), _record(1, failure="timeout")]))
    assert check_values(m)["usage_reported_share"].value == 0.5
    none = _measurement((1, [_record(1), _record(1)]))
    assert check_values(none)["usage_reported_share"].value == 0.0


def test_no_success_at_all_leaves_latency_insufficient_and_error_rate_one():
    m = _measurement((1, [_record(1, failure="transport_error")]))
    values = check_values(m)
    assert values["error_rate"].value == 1.0
    assert values["ttft_p95_at_concurrency_1"].value is None
    assert values["usage_reported_share"].value is None


def test_repeat_prompt_share_needs_a_sample(tmp_path):
    m = _measurement((1, [_record(1)]))
    assert check_values(m)["repeat_prompt_share"].value is None
    path = tmp_path / "p.txt"
    path.write_text("hello  world\nhello world\nsomething else\n  hello world  \n")
    assert check_values(m, load_prompts_file(path))["repeat_prompt_share"].value == 0.5


def test_cost_is_exact_decimal_arithmetic_in_usd():
    records = [_record(1, tokens=50), _record(1, tokens=150)]
    for r in records:
        r.prompt_tokens = 100
    cost = cost_per_1000_requests(records, Decimal("3"), Decimal("15"))
    # (100*3 + 50*15 + 100*3 + 150*15) / 1e6 / 2 * 1000 = 1.8
    assert cost.usd_per_1000_requests == Decimal("1.8")
    missing = cost_per_1000_requests([_record(1)], Decimal("3"), Decimal("15"))
    assert missing.usd_per_1000_requests is None and "usage" in missing.reason
    unpriced = cost_per_1000_requests(records, None, Decimal("15"))
    assert unpriced.usd_per_1000_requests is None and "price" in unpriced.reason
