"""A pushed report proven from its own samples.

A report uploaded by `tokvera scan --publish` claims check values. The site never grades those
claims: it rebuilds the grader's ``Measurement`` from the report's per-request timelines (every
named timestamp, every output chunk's arrival, usage, outcome) and runs the grader's own
``scans.grader.check_values.check_values`` on it. A report whose claims disagree with its samples, or whose
samples are impossible, is refused; what is stored is the recomputation.

The mapping between a ``RequestRecord`` and its timeline in report.json lives here and nowhere
else, and it is read from the dataclass itself, so a new field in the measurement travels
without a second edit: a time field ``x_at`` (seconds) is the timeline's ``x_at_ms`` (ms from the
scan's start), a per-chunk time array ``x_times`` is ``x_times_ms``, ``failure`` is ``outcome``
(``"succeeded"`` for none) and every other field keeps its name. A field the timeline does not
carry is refused unless it is listed in ``NOT_PUBLISHED`` (fields no check reads).

What a report cannot prove (see DECISIONS.md, "Pushed reports are proven from their samples"):

* ``repeat_prompt_share`` needs the prompt sample, which a report never carries: never counted
  for a pushed report, whatever it claims.
* Loop lag is the grader's own clock, not the endpoint's: a level is client-bound when the
  level's reported loop-lag p99 exceeds the grader's threshold (the site's constant, never the
  report's), by the same ``LevelResult.client_bound`` the grader uses.
* ``metrics_endpoint`` and the GPU samples are read from the report's measurements (the
  site cannot reach a pushed endpoint to probe it).
"""

from __future__ import annotations

import copy
import math
import types
import typing
from array import array
from collections.abc import Mapping
from datetime import datetime
from typing import Any, TypeGuard

from scans.grader import headline, scoring
from scans.grader.check_values import check_values, generation_rate_basis
from scans.grader.measurement import (
    FAILURE_CLASSES,
    CostFigure,
    GpuReading,
    LevelResult,
    Measurement,
    MetricsProbe,
    RequestRecord,
    budget_hint,
)
from scans.grader.objective import SloError, evaluate_level, slo_from_dict
from scans.grader.report import level_entry
from scans.grader.runner import LOOP_LAG_THRESHOLD_MS
from scans.grader.scoring import CheckValue
from scans.grader.timeline import is_time, is_time_array, record_fields
from scans.grader.timeline import key as timeline_key

__all__ = [
    "NOT_PUBLISHED",
    "ImpossibleReport",
    "ReportDisagrees",
    "measurement_from_report",
    "prove",
]

#: RequestRecord fields that report.json does not carry and no check reads.
NOT_PUBLISHED = frozenset({"reused_connection", "ignored_lines", "stream_error",
                           # open-loop rate levels only, which are never proven
                           "dispatched_at", "waited_for_connection", "connection_wait_s"})
#: RequestRecord fields that reports of older scanners lack (None when missing).
ADDED_SINCE = frozenset({"cached_tokens"})  # absent from reports older than the workload options
#: Never recomputable from a report, so never counted for a pushed one.
UNPROVABLE_CHECKS = {
    "repeat_prompt_share": ("a pushed report does not carry its prompt sample, so the site "
                            "cannot recompute this share: not counted"),
}
#: Timestamps come from the grader's clock, its wall-clock start and end from another clock:
#: a timeline may run this far past the reported duration before it is called impossible.
CLOCK_SLACK_MS = 60_000.0
#: Claimed and recomputed values agree within this: the timelines are rounded to 1 µs, so a
#: recomputed time may differ from the grader's unrounded one by that much, and a ratio or a
#: rate by a relative amount of that order. What is stored is always the recomputation.
ABS_TOLERANCE = 0.005
REL_TOLERANCE = 1e-3


class ImpossibleReport(ValueError):
    """The report's samples cannot have been measured (the message says which and why)."""


class ReportDisagrees(ValueError):
    """A claimed check value is not what the report's own samples give."""


def _allowed_types(hint: Any) -> tuple[type, ...]:
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return tuple(typing.get_args(hint))
    return (hint,)


def _number(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _time_ms(where: str, value: Any, limit_ms: float) -> float:
    if not _number(value) or not math.isfinite(value):
        raise ImpossibleReport(f"{where}: {value!r} is not a finite number of milliseconds")
    if not 0 <= value <= limit_ms:
        raise ImpossibleReport(f"{where}: {value!r} ms is outside the scan (0 to "
                               f"{limit_ms:.0f} ms)")
    return float(value)


def _record(where: str, concurrency: int, timeline: Any, limit_ms: float) -> RequestRecord:
    if not isinstance(timeline, Mapping):
        raise ImpossibleReport(f"{where}: expected an object")
    values: dict[str, Any] = {"level": concurrency}
    for name, hint in record_fields():
        key = timeline_key(name, hint)
        here = f"{where}.{key}"
        if key not in timeline:
            if name in NOT_PUBLISHED or name in ADDED_SINCE:
                continue
            raise ImpossibleReport(f"{here} is missing: the site recomputes every check from "
                                   "the per-request timelines (publish with a current tokvera)")
        value = timeline[key]
        if name == "failure":
            if value == "succeeded":
                value = None
            elif not isinstance(value, str) or not (
                    value in FAILURE_CLASSES or (value.startswith("http_status_")
                                                 and value[12:].isdigit())):
                raise ImpossibleReport(f"{here}: {value!r} is not an outcome the scanner gives")
        elif is_time(name):
            value = None if value is None else _time_ms(here, value, limit_ms) / 1000.0
        elif is_time_array(name, hint):
            if not isinstance(value, list):
                raise ImpossibleReport(f"{here}: expected a list of times")
            times = [_time_ms(f"{here}[{i}]", t, limit_ms) / 1000.0 for i, t in enumerate(value)]
            if any(b < a for a, b in zip(times, times[1:], strict=False)):
                raise ImpossibleReport(f"{here}: the chunk times go backwards")
            value = array("d", times)
        else:
            allowed = _allowed_types(hint)
            ok = (value is None and type(None) in allowed) or any(
                isinstance(value, t) and not (t is int and isinstance(value, bool))
                for t in allowed if t is not type(None))
            if not ok or (_number(value) and (not math.isfinite(value) or value < 0)):
                raise ImpossibleReport(f"{here}: {value!r} is not a valid {name}")
        values[name] = value
    if values.get("scheduled_at") is None:
        values["scheduled_at"] = 0.0
    return RequestRecord(**values)


# -- the measurement ----------------------------------------------------------------------------


def _scan_length_ms(report: Mapping[str, Any]) -> float:
    try:
        started = datetime.fromisoformat(report["started_at"])
        finished = datetime.fromisoformat(report["finished_at"])
    except (TypeError, ValueError):
        raise ImpossibleReport("started_at / finished_at: expected ISO 8601 times") from None
    length = (finished - started).total_seconds() * 1000.0
    if length < 0:
        raise ImpossibleReport("finished_at is before started_at")
    return length + CLOCK_SLACK_MS


def _plan_requests(plan: Mapping[str, Any]) -> list[int]:
    levels, per_level = plan["levels"], plan["requests_per_level"]
    if isinstance(per_level, int):
        return [per_level] * len(levels)
    if len(per_level) != len(levels):
        raise ImpossibleReport("plan.requests_per_level does not match plan.levels")
    return list(per_level)


def _loop_lag(where: str, level: Mapping[str, Any]) -> tuple[array, dict | None]:
    """The level's loop lag for LevelResult, and the summary to store (numbers only)."""
    lag = level.get("loop_lag_ms")
    if not isinstance(lag, Mapping):
        return array("d"), None
    kept = {}
    for key in ("p50", "p99", "max", "threshold", "samples"):
        value = lag.get(key)
        if value is not None and (not _number(value) or not math.isfinite(value) or value < 0):
            raise ImpossibleReport(f"{where}.loop_lag_ms.{key}: {value!r} is not a valid lag")
        kept[key] = value
    kept["threshold"] = LOOP_LAG_THRESHOLD_MS
    # The report keeps the lag's p99, not every sample: one sample at the p99 gives the same
    # LevelResult.client_bound verdict as the grader's full series.
    p99 = kept["p99"]
    return array("d", [] if p99 is None else [float(p99)]), kept


def _seconds(where: str, value: Any, limit_s: float = math.inf) -> float:
    """A level's own duration or CPU time in seconds (0 when the report has none)."""
    if value is None:
        return 0.0
    if not _number(value) or not math.isfinite(value) or not 0 <= value <= limit_s:
        raise ImpossibleReport(f"{where}: {value!r} s is not a possible duration")
    return float(value)


def _check_claimed_samples(where: str, level: Mapping[str, Any], limit_ms: float) -> None:
    """The summary samples a report shows (the TTFT histogram) must be possible too, though
    the stored ones are recomputed: more samples than requests, or a sample that no clock
    could give, means the report was not measured."""
    samples = level.get("ttft_samples_ms")
    if samples is None:
        return
    if not isinstance(samples, list):
        raise ImpossibleReport(f"{where}.ttft_samples_ms: expected a list of numbers")
    if len(samples) > level["requests"]:
        raise ImpossibleReport(f"{where}.ttft_samples_ms: {len(samples)} samples from "
                               f"{level['requests']} requests")
    for i, sample in enumerate(samples):
        _time_ms(f"{where}.ttft_samples_ms[{i}]", sample, limit_ms)


def _gpu(measurements: Mapping[str, Any]) -> GpuReading:
    samples = measurements.get("gpu_samples") or []
    shares = []
    for i, sample in enumerate(samples):
        share = sample.get("utilization") if isinstance(sample, Mapping) else None
        if not _number(share) or not 0 <= share <= 1:
            raise ImpossibleReport(f"measurements.gpu_samples[{i}].utilization: {share!r} is "
                                   "not a share from 0 to 1")
        shares.append(float(share))
    source = measurements.get("gpu_source")
    source = source if isinstance(source, str) else None
    if not shares:
        reason = measurements.get("gpu_reason")
        return GpuReading(source, None, reason if isinstance(reason, str) and reason
                          else "no GPU utilization sample", [])
    return GpuReading(source, max(shares), None, list(samples))


def _metrics(measurements: Mapping[str, Any]) -> MetricsProbe:
    probe = measurements.get("metrics_endpoint")
    if not isinstance(probe, Mapping) or not isinstance(probe.get("present"), bool):
        return MetricsProbe(url="", present=False, detail="the report has no /metrics probe")
    return MetricsProbe(url=str(probe.get("url", "")), present=probe["present"],
                        detail=str(probe.get("detail", "")))


def measurement_from_report(report: Mapping[str, Any]) -> Measurement:
    """Rebuild the grader's Measurement from a schema-valid report's own samples.

    Raises ImpossibleReport when the samples are incomplete, of the wrong type, or cannot have
    been measured (non-finite, negative, outside the scan, more samples than requests, counts
    that disagree with the timelines)."""
    limit_ms = _scan_length_ms(report)
    plan_levels = list(report["plan"]["levels"])
    planned = _plan_requests(report["plan"])
    reported = [level["concurrency"] for level in report["levels"]]
    if reported != plan_levels:
        raise ImpossibleReport(f"levels {reported} are not the plan's levels {plan_levels}")
    levels = []
    for i, (level, requests) in enumerate(zip(report["levels"], planned, strict=True)):
        where = f"levels[{i}] (concurrency {level['concurrency']})"
        if level["requests"] != requests:
            raise ImpossibleReport(f"{where}: {level['requests']} requests, but the plan sends "
                                   f"{requests}")
        _check_claimed_samples(where, level, limit_ms)
        timelines = level.get("request_timelines")
        if not isinstance(timelines, list) or len(timelines) != requests:
            count = len(timelines) if isinstance(timelines, list) else 0
            raise ImpossibleReport(
                f"{where}: {count} request timelines for {requests} requests; the site "
                "recomputes every check from every request's timeline")
        records = [_record(f"{where}.request_timelines[{j}]", level["concurrency"], t, limit_ms)
                   for j, t in enumerate(timelines)]
        lag_samples, _ = _loop_lag(where, level)
        result = LevelResult(level["concurrency"], records, loop_lag_ms=lag_samples,
                             loop_lag_threshold_ms=LOOP_LAG_THRESHOLD_MS,
                             finished_at=_seconds(f"{where}.duration_s",
                                                  level.get("duration_s"), limit_ms / 1000.0),
                             cpu_s=_seconds(f"{where}.scanner_cpu_s", level.get("scanner_cpu_s")))
        if level["succeeded"] != len(result.succeeded) or level["failed"] != \
                result.failed_by_class:
            raise ImpossibleReport(
                f"{where}: says {level['succeeded']} succeeded and failed {level['failed']}, "
                f"its timelines say {len(result.succeeded)} and {result.failed_by_class}")
        samples = [*result.ttft_samples_ms(), *result.gap_samples_ms()]
        if any(not math.isfinite(s) or s < 0 for s in samples):
            raise ImpossibleReport(f"{where}: a timeline puts an output before its request "
                                   "was written (a negative time)")
        levels.append(result)
    measurements = report["measurements"]
    return Measurement(
        base_url=report["target"]["base_url"], model=report["target"]["model"],
        started_at=report["started_at"], finished_at=report["finished_at"], levels=levels,
        metrics=_metrics(measurements), gpu=_gpu(measurements),
        cost=CostFigure(None, "not recomputed"), loop_lag_threshold_ms=LOOP_LAG_THRESHOLD_MS,
        origin_time=0.0, api=str((report.get("plan") or {}).get("api") or "chat"),
    )


# -- comparing and storing ----------------------------------------------------------------------


def _recomputed_values(measurement: Measurement) -> dict[str, CheckValue]:
    values = check_values(measurement, None)
    for check_id, reason in UNPROVABLE_CHECKS.items():
        values[check_id] = CheckValue(None, reason)
    return values


def _agree(claimed: Any, recomputed: Any) -> bool:
    if recomputed is None or isinstance(recomputed, bool):
        return claimed is recomputed  # null is null, true is true (JSON's are singletons)
    return _number(claimed) and math.isclose(claimed, recomputed, rel_tol=REL_TOLERANCE,
                                             abs_tol=ABS_TOLERANCE)


def _first_disagreement(claimed_checks: list[Mapping[str, Any]],
                        recomputed: Mapping[str, CheckValue]) -> str | None:
    claimed = {entry["id"]: entry for entry in claimed_checks}
    for check in scoring.CHECKS:
        if check.id in UNPROVABLE_CHECKS:
            continue
        entry = claimed.get(check.id, {})
        value, mine = entry.get("value"), recomputed[check.id]
        if not _agree(value, mine.value):
            return (f"checks.{check.id}: claimed {_show(value)}, samples give "
                    f"{_show(mine.value)}")
        if mine.basis is not None and entry.get("basis") != mine.basis:
            return (f"checks.{check.id}.basis: claimed {_show(entry.get('basis'))}, samples "
                    f"give {mine.basis}")
    return None


def _show(value: Any) -> str:
    return "null" if value is None else repr(value)


def _prove_slo(proven: dict, measurement: Measurement) -> None:
    """Each plan level's ``slo`` recomputed from its samples; the levels the
    capacity search added are not proven (the proof reads the plan's levels only), and the
    stored ``capacity`` says so. None of it is graded."""
    slo = (proven.get("plan") or {}).get("slo")
    if isinstance(slo, Mapping):
        try:
            objective = slo_from_dict(slo)
        except (SloError, TypeError, ValueError):
            raise ImpossibleReport("plan.slo is not a valid objective") from None
        for entry, result in zip(proven["levels"], measurement.levels, strict=True):
            entry["slo"] = evaluate_level(result, objective)
    if isinstance(proven.get("capacity"), dict):
        proven["capacity"]["proven_from_samples"] = False
    for entry in proven.get("rate_levels") or []:  # open-loop levels: kept as claimed
        if isinstance(entry, dict):
            entry["proven_from_samples"] = False
    if isinstance(proven.get("trace_replay"), dict):  # the trace replay: kept as claimed too
        proven["trace_replay"]["proven_from_samples"] = False


def prove(report: Mapping[str, Any]) -> dict:
    """The report to store: its levels, checks and score recomputed from its own samples.

    Raises ImpossibleReport for impossible samples and ReportDisagrees for the first claimed
    check value its samples do not give. `report` must already be schema-valid."""
    # The grader's own level summary, so stored levels read exactly like a measured scan's.
    measurement = measurement_from_report(report)
    values = _recomputed_values(measurement)
    mismatch = _first_disagreement(report["checks"], values)
    if mismatch is not None:
        raise ReportDisagrees(mismatch)
    graded = scoring.grade(values)
    basis = generation_rate_basis(measurement)
    proven = copy.deepcopy(dict(report))
    proven["levels"] = [
        {**level_entry(result, basis, 0.0), "loop_lag_ms": _loop_lag("", uploaded)[1]}
        for result, uploaded in zip(measurement.levels, report["levels"], strict=True)]
    _prove_slo(proven, measurement)
    if "failure_summary" in proven:
        proven["failure_summary"] = headline.scan_failure_summary(proven["levels"],
                                                                  proven.get("preflight"))
    proven["checks"] = graded.checks
    proven["score"] = graded.score
    proven["measurements"].update({
        "generation_rate_basis": basis,
        "gpu_peak_utilization": measurement.gpu.peak,
        "gpu_reason": measurement.gpu.reason,
        "reasoning": budget_hint(measurement, report["plan"]["max_tokens"]),
        "proven_from_samples": True,
    })
    return proven
