"""From what the grader measured to the check values scoring grades.

The spec's "What the checks measure", made precise: which level each check reads,
when it is insufficient_evidence and why, and the basis of the generation-rate ratio. No
Django, no HTTP: a pure function of a ``Measurement`` (and the user's prompt sample).
"""

from __future__ import annotations

from collections.abc import Sequence

from scans.grader.figures import percentile, rounded
from scans.grader.measurement import LevelResult, Measurement
from scans.grader.prompts import PromptSample, repeat_prompt_share
from scans.grader.scoring import CheckValue

__all__ = [
    "check_values",
    "client_bound_reason",
    "generation_rate_basis",
    "highest_level_with_success",
]

NO_PROMPTS_REASON = ("no --prompts sample: the built-in load prompts say nothing about real "
                     "traffic")
#: The checks that read a stream, and why an embeddings scan has none of them.
STREAM_CHECKS = ("ttft_p95_at_concurrency_1", "inter_chunk_p95_at_concurrency_1",
                 "ttft_p99_load_ratio", "generation_rate_load_ratio")
NO_STREAM_REASON = ("an embeddings scan has no stream: no first token, no chunk gaps, no "
                    "generation rate (its latency and throughput are reported per level)")


def highest_level_with_success(measurement: Measurement) -> LevelResult | None:
    """The highest configured level that had at least one succeeded request."""
    for level in reversed(measurement.levels):
        if level.succeeded:
            return level
    return None


def generation_rate_basis(measurement: Measurement) -> str:
    """``"tokens"`` when every succeeded stream of both compared levels (concurrency 1 and the
    highest level with successes) reported its usage, else ``"chunks"``. One basis for both."""
    compared = [lv for lv in (measurement.level(1), highest_level_with_success(measurement))
                if lv is not None]
    streams = [r for lv in compared for r in lv.succeeded]
    if streams and all(r.reported_usage for r in streams):
        return "tokens"
    return "chunks"


def client_bound_reason(level: LevelResult) -> str:
    return (f"client_bound: the scanner's own event loop lagged at concurrency "
            f"{level.concurrency} (p99 {level.loop_lag_p99_ms:.1f} ms > "
            f"{level.loop_lag_threshold_ms:g} ms), so that level measured the client, "
            "not the server")


def _ratio_precondition(measurement: Measurement) -> tuple[LevelResult, LevelResult] | str:
    """(concurrency-1 level, highest level with successes), or why the ratios cannot be read."""
    base = measurement.level(1)
    if base is None or not base.succeeded:
        return "no successful request at concurrency 1"
    peak = highest_level_with_success(measurement)
    if peak is None or peak.concurrency == 1:
        if len(measurement.levels) == 1:
            return "the scan had one level (concurrency 1): there is no load to compare"
        return ("the highest level with a successful request is concurrency 1: there is no "
                "loaded level to compare")
    for level in (base, peak):
        if level.client_bound:
            return client_bound_reason(level)
    return base, peak


def _input_tokens(level: LevelResult) -> float | None:
    """The median prompt length of a level's successful requests as the server counted it
    (what a latency bound that follows the workload is judged at); None when no request's
    usage said."""
    counted = [r.prompt_tokens for r in level.succeeded if r.prompt_tokens is not None]
    median = percentile(counted, 50)
    return rounded(median) if median is not None else None


def _share(numerator: int, denominator: int) -> float:
    return numerator / denominator


def check_values(measurement: Measurement,
                 prompts_sample: PromptSample | Sequence[object] | None = None
                 ) -> dict[str, CheckValue]:
    """Every check's value (or None and the reason) for `scans.grader.scoring.grade`."""
    values: dict[str, CheckValue] = {}
    base = measurement.level(1)

    # Latency at concurrency 1
    if base is None:
        values["ttft_p95_at_concurrency_1"] = CheckValue(None, "the scan had no concurrency-1 "
                                                               "level")
        values["inter_chunk_p95_at_concurrency_1"] = values["ttft_p95_at_concurrency_1"]
    else:
        ttft = percentile(base.ttft_samples_ms(), 95)
        values["ttft_p95_at_concurrency_1"] = (
            CheckValue(ttft, input_tokens=_input_tokens(base)) if ttft is not None
            else CheckValue(None, "no successful request at concurrency 1"))
        gap = percentile(base.gap_samples_ms(), 95)
        values["inter_chunk_p95_at_concurrency_1"] = (
            CheckValue(gap) if gap is not None else CheckValue(
                None, "no chunk gap at concurrency 1: no successful stream had two content "
                      "chunks" if base.succeeded else "no successful request at concurrency 1"))

    # Load ratios: the highest level with successes over concurrency 1
    compared = _ratio_precondition(measurement)
    basis = generation_rate_basis(measurement)
    if isinstance(compared, str):
        values["ttft_p99_load_ratio"] = CheckValue(None, compared)
        values["generation_rate_load_ratio"] = CheckValue(None, compared, basis)
    else:
        low, high = compared
        p99_low = percentile(low.ttft_samples_ms(), 99)
        p99_high = percentile(high.ttft_samples_ms(), 99)
        if p99_low is None or p99_high is None or p99_low <= 0:
            values["ttft_p99_load_ratio"] = CheckValue(None, "no time-to-first-token sample to "
                                                             "compare")
        else:
            values["ttft_p99_load_ratio"] = CheckValue(
                p99_high / p99_low, input_tokens=_input_tokens(low), loaded_p99_ms=p99_high)
        rate_low = percentile(low.rates(basis), 50)
        rate_high = percentile(high.rates(basis), 50)
        if rate_low is None or rate_high is None or rate_low <= 0:
            values["generation_rate_load_ratio"] = CheckValue(
                None, f"no stream with at least 2 {basis} at concurrency 1 and at concurrency "
                      f"{high.concurrency}", basis)
        else:
            values["generation_rate_load_ratio"] = CheckValue(rate_high / rate_low, None, basis)

    if measurement.api == "embeddings":
        for check in STREAM_CHECKS:
            values[check] = CheckValue(None, NO_STREAM_REASON,
                                       values[check].basis if check in values else None)

    # Reliability
    records = measurement.all_requests
    if records:
        failed = sum(1 for r in records if r.failure is not None)
        values["error_rate"] = CheckValue(_share(failed, len(records)))
    else:
        values["error_rate"] = CheckValue(None, "no request was sent")
    peak = measurement.levels[-1] if measurement.levels else None
    if peak is not None and peak.requests:
        failed = sum(1 for r in peak.requests if r.failure is not None)
        values["error_rate_at_peak"] = CheckValue(_share(failed, len(peak.requests)))
    else:
        values["error_rate_at_peak"] = CheckValue(None, "no request was sent at the highest "
                                                        "level")

    # Observability
    succeeded = [r for r in records if r.failure is None]
    if succeeded:
        reported = sum(1 for r in succeeded if r.reported_usage)
        values["usage_reported_share"] = CheckValue(_share(reported, len(succeeded)))
    else:
        values["usage_reported_share"] = CheckValue(None, "no successful stream")
    values["metrics_endpoint"] = CheckValue(bool(measurement.metrics.present))

    # Cost and cache
    if prompts_sample is None:
        values["repeat_prompt_share"] = CheckValue(None, NO_PROMPTS_REASON)
    else:
        prompts = (prompts_sample.prompts if isinstance(prompts_sample, PromptSample)
                   else prompts_sample)
        share = repeat_prompt_share(prompts)
        values["repeat_prompt_share"] = (CheckValue(share) if share is not None
                                         else CheckValue(None, "the prompt sample is empty"))

    # Preview
    gpu = measurement.gpu
    values["gpu_utilization_at_peak"] = (
        CheckValue(gpu.peak) if gpu.peak is not None
        else CheckValue(None, gpu.reason or "no GPU utilization sample"))
    return values
