"""report.json.

``report_from_measurement`` is what the CLI and the Celery task call after a scan:
measurement → check values → scoring → the report dict (docs/report.schema.json). The report
never contains the API key. ``regrade`` recomputes checks and score from a stored report's
values under the current scoring code; it never re-measures. ``write_report`` writes
report.json beside report.html (report_html.py); the words both show are report_text.py's.
"""
from __future__ import annotations

import copy
import dataclasses
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from scans.grader import headline, scoring
from scans.grader.agent_load import (
    conversation_figures,
    structured_output_figures,
    tool_call_figures,
)
from scans.grader.capacity import capacity_result
from scans.grader.check_values import check_values, generation_rate_basis
from scans.grader.figures import percentile, percentiles, rounded
from scans.grader.measurement import (
    GRADED_TTFT,
    LevelResult,
    Measurement,
    budget_hint,
    end_to_end_ms,
)
from scans.grader.objective import evaluate_level
from scans.grader.openloop import rate_figures
from scans.grader.plan import ScanPlan
from scans.grader.prompts import PromptSample
from scans.grader.redaction import redact_report
from scans.grader.replicas import by_url_figures
from scans.grader.report_html import render_html
from scans.grader.timeline import sample_times_ms
from scans.grader.trace_replay import trace_figures

__all__ = [
    "REPEAT_PROMPT_NOTE",
    "REPORT_SCHEMA_PATH",
    "TTFT_BASIS",
    "build_report",
    "level_entry",
    "preflight_warnings",
    "rate_level_entry",
    "regrade",
    "trace_replay_entry",
    "report_from_measurement",
    "workload_figures",
    "write_report",
]

#: report.json's JSON Schema: docs/report.schema.json, linked into the package so that a wheel
#: ships it. Pushed reports are checked against it.
REPORT_SCHEMA_PATH = Path(__file__).resolve().parent / "report.schema.json"
REPEAT_PROMPT_NOTE = ("The repeat-prompt share means something only when the sample is what "
                      "actually reached the model (for example, exported after any gateway "
                      "cache).")
_TIMELINE_LIMIT = 2000  # per level: raw per-request timelines kept in report.json
#: What the graded ``ttft_*`` checks read (DECISIONS.md, "Reasoning models").
TTFT_BASIS = {
    "graded": GRADED_TTFT,
    "text": ("time to first token = time to the first output token of any kind (thinking "
             "included); the time to the first answer token is reported beside it"),
}



def _spread(values: Sequence[int]) -> dict | None:
    """{p50, min, max, n} of token counts; None without any."""
    if not values:
        return None
    return {"p50": rounded(percentile(values, 50)), "min": min(values), "max": max(values),
            "n": len(values)}


def workload_figures(level: LevelResult) -> dict:
    """What a level's successful requests carried, as the server counted it:
    prompt and output tokens, and the share of prompt tokens it said were cached."""
    succeeded = level.succeeded
    prompts = [r.prompt_tokens for r in succeeded if r.prompt_tokens is not None]
    outputs = [r.completion_tokens for r in succeeded if r.completion_tokens is not None]
    cached = [(r.cached_tokens, r.prompt_tokens) for r in succeeded
              if r.cached_tokens is not None and r.prompt_tokens]
    total = sum(p for _, p in cached)
    return {
        "prompt_tokens": _spread(prompts),
        "output_tokens": _spread(outputs),
        "cached_prompt_share": rounded(sum(c for c, _ in cached) / total, 4) if total else None,
        "cached_reported": len(cached),
    }


def _level_dict(level: LevelResult, basis: str, origin: float) -> dict:
    ttft = level.ttft_samples_ms()
    gaps = level.gap_samples_ms()
    rates = level.rates(basis)
    succeeded = level.succeeded
    lag = list(level.loop_lag_ms)
    return {
        "concurrency": level.concurrency,
        "requests": len(level.requests),
        "succeeded": len(succeeded),
        "failed": level.failed_by_class,
        "failure_examples": level.failure_examples,
        "retried": sum(1 for r in level.requests if r.retried),
        "usage_reported": sum(1 for r in succeeded if r.reported_usage),
        "ttft_ms": percentiles(ttft),  # the graded time: see measurements.ttft_basis
        "time_to_first_answer_ms": percentiles(level.first_answer_samples_ms()),
        "thinking_ms": percentiles(level.thinking_samples_ms()),
        "output": level.output_shares(),
        "chunk_gap_ms": percentiles(gaps),
        "generation_rate": {
            "median": rounded(percentile(rates, 50)),
            "basis": basis,
            "unit": f"{basis}/s",
            "streams": len(rates),
        },
        "client_bound": level.client_bound,
        "loop_lag_ms": {
            "p50": rounded(percentile(lag, 50)), "p99": rounded(level.loop_lag_p99_ms),
            "max": rounded(level.loop_lag_max_ms), "threshold": level.loop_lag_threshold_ms,
            "samples": len(lag),
        },
        "duration_s": rounded(level.duration_s),
        "scanner_cpu_s": rounded(level.cpu_s),
        "output_chunks": level.output_chunks,
        **workload_figures(level),
        "ttft_samples_ms": [rounded(t, 2) for t in ttft],
        # every chunk's arrival too, so a site can recompute the checks (scans/grader/proof.py)
        "request_timelines": [{**r.timeline_ms(origin), **sample_times_ms(r, origin)}
                              for r in level.requests[:_TIMELINE_LIMIT]],
    }


def embeddings_figures(level: LevelResult) -> dict:
    """An embeddings level's latency (request written to the answer's last byte) and
    throughput: inputs embedded per second and, when every answer stated its usage, input
    tokens per second, over the level's wall time. No stream: no TTFT, no chunk gaps."""
    succeeded = level.succeeded
    latency = [t for r in succeeded if (t := end_to_end_ms(r)) is not None]
    tokens = [r.prompt_tokens for r in succeeded if r.prompt_tokens is not None]
    duration = level.duration_s
    every_stated = bool(tokens) and len(tokens) == len(succeeded)
    return {
        "latency_ms": percentiles(latency),
        "inputs_per_s": rounded(len(succeeded) / duration) if duration > 0 else None,
        "tokens_per_s": (rounded(sum(tokens) / duration) if duration > 0 and every_stated
                         else None),
        "tokens_basis": "usage.prompt_tokens",
        "usage_reported": len(tokens),
    }


def agent_figures(level: LevelResult) -> dict:
    """A level's conversation, tool-call and structured-output figures, each only when the
    scan sent that shape (measured, never graded)."""
    figures = {"turns": conversation_figures(level), "tool_calls": tool_call_figures(level),
               "structured_output": structured_output_figures(level)}
    return {name: value for name, value in figures.items() if value is not None}


def level_entry(level: LevelResult, basis: str, origin: float) -> dict:
    """One level of report.json: its measured summary, headline numbers and failure summary
    (also what the site stores for a pushed report's recomputed levels, scans/grader/proof.py)."""
    entry = _level_dict(level, basis, origin)
    if level.stopped_early is not None:  # --stop-on-saturation: its requests are those sent
        entry["stopped_early"] = level.stopped_early
    entry.update(agent_figures(level))
    entry.update(headline.level_numbers(level))
    entry["failure_summary"] = headline.failure_summary(
        entry["failed"], entry["failure_examples"], entry["requests"])
    return entry


def rate_level_entry(level: LevelResult, basis: str, origin: float, plan: ScanPlan) -> dict:
    """One open-loop rate level of report.json: the usual figures (from the request body
    written; ``concurrency`` is the peak in flight), the same from the scheduled time, the
    achieved rate, the waits for a connection, and whether the grader held the rate."""
    entry = {**level_entry(level, basis, origin), **rate_figures(level)}
    if plan.slo is not None:
        entry["slo"] = evaluate_level(level, plan.slo, from_schedule=True)
    return entry


def trace_replay_entry(measurement: Measurement, basis: str, plan: ScanPlan) -> dict | None:
    """report.json's ``trace_replay``: the replayed trace's usual figures (from the request
    body written; ``concurrency`` is the peak in flight), the same from the scheduled time, the
    offered and achieved rates, the shared blocks and how the lengths held; None when the
    trace was not replayed (a stopped scan, or a level that stopped early)."""
    level = measurement.trace_level
    if plan.trace is None or level is None:
        return None
    facts = (measurement.trace or {}).get("preparation") or {}
    entry = {**level_entry(level, basis, measurement.origin_time),
             **trace_figures(level, plan.trace, facts)}
    if plan.slo is not None:
        entry["slo"] = evaluate_level(level, plan.slo, from_schedule=True)
    return entry


def build_report(plan: ScanPlan, measurement: Measurement, graded: scoring.Graded,
                 measurements_extra: Mapping[str, Any] | None = None) -> dict:
    """The report.json dict. Never includes the API key."""
    basis = generation_rate_basis(measurement)
    cost = measurement.cost
    measurements: dict[str, Any] = {
        "cost_per_1000_requests": (None if cost.usd_per_1000_requests is None
                                   else float(round(cost.usd_per_1000_requests, 6))),
    }
    if cost.usd_per_1000_requests is None:
        measurements["cost_reason"] = cost.reason or "not measured"
    else:
        measurements["cost_basis"] = (f"mean measured usage of {cost.streams_priced} "
                                      "successful streams, USD")
    measurements.update({
        "gpu_source": measurement.gpu.source,
        "gpu_peak_utilization": measurement.gpu.peak,
        "gpu_reason": measurement.gpu.reason,
        "gpu_samples": measurement.gpu.samples,
        "metrics_endpoint": {"url": measurement.metrics.url,
                             "present": measurement.metrics.present,
                             "detail": measurement.metrics.detail},
        "generation_rate_basis": basis,
        "ttft_basis": TTFT_BASIS,
        "reasoning": budget_hint(measurement, plan.max_tokens),
        "scanner": measurement.scanner,
        "repeat_prompt_note": REPEAT_PROMPT_NOTE,
    })
    if measurements_extra:
        measurements.update(measurements_extra)
    levels = [level_entry(level, basis, measurement.origin_time) for level in measurement.levels]
    if plan.api == "embeddings":
        for entry, level in zip(levels, measurement.levels, strict=True):
            entry["embeddings"] = embeddings_figures(level)
    if plan.replicas:  # where the load went; grading reads the whole level's figures
        for entry, level in zip(levels, measurement.levels, strict=True):
            entry["by_url"] = by_url_figures(level, plan.urls)
    searched = [{**level_entry(level, basis, measurement.origin_time), "searched": True}
                for level in measurement.searched_levels]
    slo_part: dict[str, Any] = {}
    if plan.slo is not None:  # attainment and goodput per level, not graded
        for entry, level in zip([*levels, *searched],
                                [*measurement.levels, *measurement.searched_levels],
                                strict=True):
            entry["slo"] = evaluate_level(level, plan.slo)
        if plan.find_capacity:
            slo_part["search_levels"] = searched
            slo_part["capacity"] = capacity_result(levels, searched, plan.slo,
                                                   exhausted=measurement.search_exhausted)
    if plan.open_loop is not None:  # open-loop rate levels, measured, not graded
        slo_part["rate_levels"] = [rate_level_entry(level, basis, measurement.origin_time, plan)
                                   for level in measurement.rate_levels]
        if plan.api == "embeddings":
            for entry, level in zip(slo_part["rate_levels"], measurement.rate_levels,
                                    strict=True):
                entry["embeddings"] = embeddings_figures(level)
    if (trace := trace_replay_entry(measurement, basis, plan)) is not None:  # not graded
        slo_part["trace_replay"] = trace
    preflight = measurement.preflight.as_dict() if measurement.preflight is not None else None
    if preflight is not None:
        preflight["warnings"] = preflight_warnings(preflight, measurement.model)
    # Error messages are the server's words and servers echo keys: none survives.
    return redact_report({
        "tool_version": f"tokvera {measurement.scanner.get('version', 'unknown')}",
        "target": {"base_url": measurement.base_url, "model": measurement.model},
        "server": measurement.server,  # what the server says of itself: never graded
        "started_at": measurement.started_at,
        "finished_at": measurement.finished_at,
        "plan": {**plan.public_dict(), "workload": _workload_entry(plan, measurement)},
        "preflight": preflight,
        "failure_summary": headline.scan_failure_summary(levels, preflight),
        "levels": levels,
        **({"skipped_levels": measurement.skipped_levels}
           if measurement.skipped_levels else {}),
        **slo_part,
        "checks": graded.checks,
        "measurements": measurements,
        "score": graded.score,
    }, [plan.api_key] if plan.api_key else [])


def _workload_entry(plan: ScanPlan, measurement: Measurement) -> dict | None:
    workload = dict(measurement.workload) if measurement.workload else None
    agent = plan.workload.agent_dict()
    if workload is not None and agent is not None:
        workload["agent"] = agent
    return workload


def preflight_warnings(preflight: Mapping[str, Any], model: str) -> list[dict]:
    """What the preflight found that does not stop a scan but makes its grade doubtful, each
    {"kind", "message"}: report.json's ``preflight.warnings``, printed by `tokvera scan` before
    the grade. "model_not_listed": GET /models answered with a list that lacks --model (a
    server that serves one model whatever is asked answers anyway)."""
    models = preflight.get("models") or {}
    if not models.get("answered") or models.get("model_listed") is not False:
        return []
    if preflight.get("kind") == "model_not_found":  # the cause already says so
        return []
    ids = [str(i) for i in models.get("ids") or []]
    named = ", ".join(ids[:8]) if ids else "no model at all"
    total = int(models.get("ids_total") or len(ids))
    more = f" and {total - min(len(ids), 8):,} more" if total > min(len(ids), 8) else ""
    return [{"kind": "model_not_listed", "model": model,
             "message": (f"the server does not list model '{model}' (it lists: {named}{more}); "
                         "the grade is of whatever answered")}]


def report_from_measurement(plan: ScanPlan, measurement: Measurement,
                            prompts_sample: PromptSample | None = None) -> dict:
    """measurement → check values → grade → report dict (what the CLI and the task call)."""
    graded = scoring.grade(check_values(measurement, prompts_sample))
    extra = None
    if prompts_sample is not None:
        extra = {"prompts_sample": {"format": prompts_sample.format,
                                    "prompts": len(prompts_sample.prompts)}}
    return build_report(plan, measurement, graded, extra)


def regrade(report: Mapping[str, Any], version: str | None = None) -> dict:
    """Recompute every check status and the score from the values stored in `report`, under
    a scoring version (default: the current one). Never re-measures; everything else is kept
    as it was. ValueError for a version never published."""
    values = scoring.values_from_checks(report["checks"])
    ttft = values.get("ttft_p95_at_concurrency_1")
    if ttft is not None and ttft.input_tokens is None:
        # A report graded before bounds followed the workload: its first level's prompts.
        values["ttft_p95_at_concurrency_1"] = dataclasses.replace(
            ttft, input_tokens=stored_input_tokens(report))
    ratio = values.get("ttft_p99_load_ratio")
    if ratio is not None and isinstance(ratio.value, int | float) and ratio.loaded_p99_ms is None:
        # Likewise: the loaded p99 is the ratio times the stored concurrency-1 p99.
        alone = _level_figure(report, "ttft_ms", "p99")
        values["ttft_p99_load_ratio"] = dataclasses.replace(
            ratio, input_tokens=ratio.input_tokens or stored_input_tokens(report),
            loaded_p99_ms=None if alone is None else ratio.value * alone)
    graded = scoring.grade(values, version)
    new = copy.deepcopy(dict(report))
    previous = (report.get("score") or {}).get("scoring_version")
    new["checks"] = graded.checks
    new["score"] = graded.score
    new.setdefault("measurements", {})["regraded_from_scoring_version"] = previous
    return new


def _level_figure(report: Mapping[str, Any], figure: str, stat: str) -> float | None:
    """One figure of a stored report's concurrency-1 level (None when unknown)."""
    for level in report.get("levels") or []:
        if isinstance(level, Mapping) and level.get("concurrency") == 1:
            spread = level.get(figure)
            value = spread.get(stat) if isinstance(spread, Mapping) else None
            return float(value) if isinstance(value, int | float) else None
    return None


def stored_input_tokens(report: Mapping[str, Any]) -> float | None:
    """The median prompt tokens of a stored report's concurrency-1 level (None when unknown)."""
    return _level_figure(report, "prompt_tokens", "p50")


def write_report(report: Mapping[str, Any], out_dir: str | os.PathLike) -> tuple[Path, Path]:
    """Write report.json and report.html into `out_dir` (created if needed)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    json_path = out / "report.json"
    html_path = out / "report.html"
    json_path.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n",
                         encoding="utf-8")
    html_path.write_text(render_html(report), encoding="utf-8")
    return json_path, html_path

