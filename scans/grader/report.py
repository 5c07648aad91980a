"""report.json and report.html.

``report_from_measurement`` is what the CLI and the Celery task call after a scan:
measurement → check values → scoring → the report dict (docs/report.schema.json). The report
never contains the API key. ``regrade`` recomputes checks and score from a stored report's
values under the current scoring code; it never re-measures. ``render_html`` renders the one
self-contained HTML file (inline CSS and SVG, no network) from
scans/grader/templates/report/report.html with Jinja2 (autoescaped; ``rendering``), so the CLI
needs no Django and no site settings.
"""

from __future__ import annotations

import copy
import json
import math
import os
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from scans.grader import formatting as fmt
from scans.grader import headline, rendering, scoring
from scans.grader.check_values import check_values, generation_rate_basis
from scans.grader.measurement import GRADED_TTFT, LevelResult, Measurement, budget_hint
from scans.grader.openloop import rate_figures
from scans.grader.plan import ScanPlan
from scans.grader.probes import NOT_SAMPLED_HERE, is_loopback_host
from scans.grader.prompts import PromptSample
from scans.grader.redaction import redact_report
from scans.grader.scoring import CHECK_LABELS
from scans.grader.slo import capacity, evaluate_level
from scans.grader.stats import percentile
from scans.grader.timeline import sample_times_ms

__all__ = [
    "REPEAT_PROMPT_NOTE",
    "build_report",
    "cli_notes",
    "cap_text",
    "comparability",
    "level_entry",
    "preflight_warnings",
    "rate_level_entry",
    "regrade",
    "render_html",
    "report_from_measurement",
    "workload_key",
    "workload_lines",
    "write_report",
]

REPEAT_PROMPT_NOTE = ("The repeat-prompt share means something only when the sample is what "
                      "actually reached the model (for example, exported after any gateway "
                      "cache).")
_TIMELINE_LIMIT = 2000  # per level: raw per-request timelines kept in report.json
#: What the graded ``ttft_*`` checks read (issue 15; DECISIONS.md, "Reasoning models").
TTFT_BASIS = {
    "graded": GRADED_TTFT,
    "text": ("time to first token = time to the first output token of any kind (thinking "
             "included); the time to the first answer token is reported beside it"),
}


def _r(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(float(value), digits)


def _percentiles(samples: Sequence[float]) -> dict | None:
    if not samples:
        return None
    return {"p50": _r(percentile(samples, 50)), "p95": _r(percentile(samples, 95)),
            "p99": _r(percentile(samples, 99)), "n": len(samples)}


def _spread(values: Sequence[int]) -> dict | None:
    """{p50, min, max, n} of token counts; None without any."""
    if not values:
        return None
    return {"p50": _r(percentile(values, 50)), "min": min(values), "max": max(values),
            "n": len(values)}


def workload_figures(level: LevelResult) -> dict:
    """What a level's successful requests carried, as the server counted it (issue 21):
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
        "cached_prompt_share": _r(sum(c for c, _ in cached) / total, 4) if total else None,
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
        "ttft_ms": _percentiles(ttft),  # the graded time: see measurements.ttft_basis
        "time_to_first_answer_ms": _percentiles(level.first_answer_samples_ms()),
        "thinking_ms": _percentiles(level.thinking_samples_ms()),
        "output": level.output_shares(),
        "chunk_gap_ms": _percentiles(gaps),
        "generation_rate": {
            "median": _r(percentile(rates, 50)),
            "basis": basis,
            "unit": f"{basis}/s",
            "streams": len(rates),
        },
        "client_bound": level.client_bound,
        "loop_lag_ms": {
            "p50": _r(percentile(lag, 50)), "p99": _r(level.loop_lag_p99_ms),
            "max": _r(level.loop_lag_max_ms), "threshold": level.loop_lag_threshold_ms,
            "samples": len(lag),
        },
        "duration_s": _r(level.duration_s),
        "scanner_cpu_s": _r(level.cpu_s),
        "output_chunks": level.output_chunks,
        **workload_figures(level),
        "ttft_samples_ms": [_r(t, 2) for t in ttft],
        # every chunk's arrival too, so a site can recompute the checks (scans/grader/proof.py)
        "request_timelines": [{**r.timeline_ms(origin), **sample_times_ms(r, origin)}
                              for r in level.requests[:_TIMELINE_LIMIT]],
    }


def level_entry(level: LevelResult, basis: str, origin: float) -> dict:
    """One level of report.json: its measured summary, headline numbers and failure summary
    (also what the site stores for a pushed report's recomputed levels, scans/grader/proof.py)."""
    entry = _level_dict(level, basis, origin)
    entry.update(headline.level_numbers(level))
    entry["failure_summary"] = headline.failure_summary(
        entry["failed"], entry["failure_examples"], entry["requests"])
    return entry


def rate_level_entry(level: LevelResult, basis: str, origin: float, plan: ScanPlan) -> dict:
    """One open-loop rate level of report.json: the usual figures (from the request body
    written; ``concurrency`` is the peak in flight), the same from the scheduled time, the
    achieved rate, the waits for a connection, and whether the scanner held the rate."""
    entry = {**level_entry(level, basis, origin), **rate_figures(level)}
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
    searched = [{**level_entry(level, basis, measurement.origin_time), "searched": True}
                for level in measurement.searched_levels]
    slo_part: dict[str, Any] = {}
    if plan.slo is not None:  # issue 22: attainment and goodput per level, not graded
        for entry, level in zip([*levels, *searched],
                                [*measurement.levels, *measurement.searched_levels],
                                strict=True):
            entry["slo"] = evaluate_level(level, plan.slo)
        if plan.find_capacity:
            slo_part["search_levels"] = searched
            slo_part["capacity"] = capacity(levels, searched, plan.slo,
                                            exhausted=measurement.search_exhausted)
    if plan.open_loop is not None:  # issue 22: open-loop rate levels, measured, not graded
        slo_part["rate_levels"] = [rate_level_entry(level, basis, measurement.origin_time, plan)
                                   for level in measurement.rate_levels]
    preflight = measurement.preflight.as_dict() if measurement.preflight is not None else None
    if preflight is not None:
        preflight["warnings"] = preflight_warnings(preflight, measurement.model)
    # Error messages are the server's words and servers echo keys: none survives.
    return redact_report({
        "tool_version": f"tokvera {measurement.scanner.get('version', 'unknown')}",
        "target": {"base_url": measurement.base_url, "model": measurement.model},
        "started_at": measurement.started_at,
        "finished_at": measurement.finished_at,
        "plan": {**plan.public_dict(), "workload": measurement.workload or None},
        "preflight": preflight,
        "failure_summary": headline.scan_failure_summary(levels, preflight),
        "levels": levels,
        **slo_part,
        "checks": graded.checks,
        "measurements": measurements,
        "score": graded.score,
    }, [plan.api_key] if plan.api_key else [])


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


def regrade(report: Mapping[str, Any]) -> dict:
    """Recompute every check status and the score from the values stored in `report`, under
    the current scoring code. Never re-measures; everything else is kept as it was."""
    values = scoring.values_from_checks(report["checks"])
    graded = scoring.grade(values)
    new = copy.deepcopy(dict(report))
    previous = (report.get("score") or {}).get("scoring_version")
    new["checks"] = graded.checks
    new["score"] = graded.score
    new.setdefault("measurements", {})["regraded_from_scoring_version"] = previous
    return new


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


# -- HTML ----------------------------------------------------------------------------------------

#: Statuses as people read them (report.html); check labels: scoring.CHECK_LABELS.
STATUS_LABELS = {"pass": "pass", "warn": "warning", "fail": "fail",
                 "insufficient_evidence": "not counted", "preview": "preview, not counted"}


def _status_text(check: Mapping[str, Any]) -> str:
    """ "not counted: no --prompts sample" rather than "insufficient_evidence"."""
    status = str(check.get("status"))
    label = STATUS_LABELS.get(status, status)
    reason = check.get("reason")
    if not check.get("counted", True) and reason:
        head, _, rest = reason.partition(":")
        if rest and " " not in head.strip():  # "client_bound: the scanner's …": the words
            head = rest.strip().split(",")[0].split(";")[0]
        return f"{label}: {head if len(reason) > 60 else reason}"
    return label


def _check_bounds(check: Mapping[str, Any]) -> list:
    return [b["value"] for b in (check.get("pass"), check.get("warn"))
            if isinstance(b, Mapping) and not isinstance(b.get("value"), bool)]


def _fmt(value: Any, unit: str | None = None) -> str:
    if isinstance(value, int | float) and not isinstance(value, bool) and not unit:
        return fmt.number(value, "rate")
    return fmt.check_value(value, unit or "")


def _bound(bound: Mapping[str, Any], unit: str) -> str:
    return fmt.bound_text(bound["op"], bound["value"], unit)


def _ms_texts(figures: Mapping[str, Any] | None) -> dict[str, str]:
    """p50/p95/p99 (and max) as display text in ms (no unit); a dash when missing."""
    figures = figures or {}
    return {key: fmt.number(figures[key] if isinstance(figures.get(key), int | float)
                            else None, "ms")
            for key in ("p50", "p95", "p99", "max")}


def _when(iso: Any) -> str:
    """An ISO timestamp as "2025-05-01 12:03:04 UTC" (the report is read anywhere)."""
    try:
        moment = datetime.fromisoformat(str(iso).replace("Z", "+00:00"))
    except ValueError:
        return str(iso or "")
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def _took(report: Mapping[str, Any]) -> str | None:
    try:
        start, end = (datetime.fromisoformat(str(report.get(k)).replace("Z", "+00:00"))
                      for k in ("started_at", "finished_at"))
    except ValueError:
        return None
    return fmt.seconds((end - start).total_seconds())


def _ttft_basis_text(measurements: Mapping[str, Any]) -> str:
    """Which time the graded TTFT checks read; reports from before issue 15 have no
    ``ttft_basis`` and read the first content chunk (no thinking was parsed then)."""
    basis = measurements.get("ttft_basis")
    if isinstance(basis, Mapping) and basis.get("graded") == "first_output_token":
        return "the first output token"
    return "the first content chunk (a report from before thinking was parsed)"


def cli_notes(report: Mapping[str, Any]) -> list[str]:
    """The lines `tokvera scan` prints about which TTFT was graded and about thinking."""
    measurements = report.get("measurements") or {}
    lines = [f"TTFT is graded at {_ttft_basis_text(measurements)} (thinking included)"]
    reasoning = measurements.get("reasoning")
    if isinstance(reasoning, Mapping):
        for lv in report.get("levels", []):
            answer = _ms_texts(lv.get("time_to_first_answer_ms"))
            thinking = _ms_texts(lv.get("thinking_ms"))
            lines.append(f"concurrency {lv.get('concurrency')}: first answer p50 "
                         f"{answer['p50']} ms, thinking p50 {thinking['p50']} ms")
        lines.append(str(reasoning.get("note")))
    return lines


def _tokens(value: Any) -> str:
    return f"{value:,.0f}" if isinstance(value, int | float) else "—"


def workload_lines(report: Mapping[str, Any]) -> list[str]:
    """What the load sent, as `tokvera scan` prints it: "A at 1/4/16 × 20, 4,000 → 256
    tokens", then what the server said it got, and whether the reply length held."""
    plan = report.get("plan") or {}
    work = plan.get("workload") or {}
    score = report.get("score") or {}
    grade = score.get("grade") if score.get("grade") in scoring.GRADES else "no grade"
    levels = "/".join(str(lv) for lv in plan.get("levels") or [])
    counts = plan.get("requests_per_level")
    counts = counts if isinstance(counts, list) else [counts]
    per = str(counts[0]) if len(set(counts)) == 1 else "/".join(str(c) for c in counts)
    dataset = work.get("dataset") or {}
    spread = work.get("input_distribution") or {}
    if spread.get("kind") == "uniform":
        sent_in = f"{_tokens(spread.get('min'))}–{_tokens(spread.get('max'))}"
    elif spread.get("kind") == "normal":
        sent_in = f"{_tokens(spread.get('mean'))}±{_tokens(spread.get('sd'))}"
    elif work.get("input_tokens"):
        sent_in = _tokens(work["input_tokens"])
    elif dataset:
        sent_in = f"{dataset.get('name')} ({dataset.get('lines')} prompts)"
    else:
        sent_in = "built-in prompts"
    if work.get("shared_prefix_tokens"):
        sent_in += f" ({_tokens(work['shared_prefix_tokens'])} shared)"
    out = (_tokens(work["output_tokens"]) if work.get("output_tokens")
           else f"≤ {_tokens(plan.get('max_tokens'))}")
    preset = work.get("preset") or {}
    shape = f" (--workload {preset['name']})" if preset.get("name") else ""
    lines = [f"{grade} at {levels} × {per}, {sent_in} → {out} tokens{shape}"]
    achieved = []
    for lv in report.get("levels") or []:
        prompt = (lv.get("prompt_tokens") or {}).get("p50")
        output = (lv.get("output_tokens") or {}).get("p50")
        if prompt is None and output is None:
            continue
        share = lv.get("cached_prompt_share")
        cached = f", {fmt.percent(share)} cached" if isinstance(share, int | float) else ""
        achieved.append(f"{lv.get('concurrency')}: {_tokens(prompt)} → {_tokens(output)}{cached}")
    if achieved:
        lines.append("server counted (p50) at " + "; ".join(achieved))
    length = work.get("output_length") or {}
    if work.get("output_tokens") and length.get("note"):
        lines.append(f"reply length {length['note']}")
    return lines


def workload_key(report: Mapping[str, Any]) -> dict:
    """What must match for two reports' figures to be compared: the workload asked (not the
    nonce's value, not how prompts were sized). A report from before issue 21 sent the same
    built-in prompts every scan, without a nonce."""
    plan = report.get("plan") or {}
    work = plan.get("workload")
    if not isinstance(work, Mapping):
        return {"nonce": False, "input_tokens": None, "input_distribution": None,
                "output_tokens": None, "shared_prefix_tokens": None, "dataset": None,
                "max_tokens": plan.get("max_tokens"), "warmup": 0}
    dataset = work.get("dataset") or None
    spread = work.get("input_distribution")
    return {"nonce": True, "input_tokens": work.get("input_tokens"),
            "input_distribution": ({k: spread.get(k) for k in ("kind", "min", "max", "mean", "sd",
                                                                "seed")}
                                   if isinstance(spread, Mapping) else None),
            "output_tokens": work.get("output_tokens"),
            "shared_prefix_tokens": work.get("shared_prefix_tokens"),
            "dataset": ({"lines": dataset.get("lines"), "sha256": dataset.get("sha256")}
                        if isinstance(dataset, Mapping) else None),
            "max_tokens": plan.get("max_tokens"), "warmup": work.get("warmup", 0)}


def _key_text(value: Any) -> str:
    """A workload field as a reader reads it ("not set", never Python's None)."""
    return "not set" if value is None else repr(value)


def comparability(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """Why reports `a` and `b` are not comparable (empty when they are): a different scoring
    version or a different workload."""
    reasons = []
    va = (a.get("score") or {}).get("scoring_version")
    vb = (b.get("score") or {}).get("scoring_version")
    if va != vb:
        reasons.append(f"scoring versions differ ({va} and {vb}): re-grade the older one")
    ka, kb = workload_key(a), workload_key(b)
    differ = [name for name in ka if ka[name] != kb[name]]
    if differ:
        shown = ", ".join(f"{name} {_key_text(ka[name])} vs {_key_text(kb[name])}"
                          for name in differ if name != "nonce")
        if "nonce" in differ:
            shown = ("one report is from before every prompt carried a nonce (its prompts may "
                     "have been served from a prefix cache)" + (f"; {shown}" if shown else ""))
        reasons.append(f"workloads differ: {shown}")
    return reasons


#: Where a report is read: "cli" (the file `tokvera scan` writes, beside its flags) or "site"
#: (the scan page, where the same settings are the endpoint's form fields).
SURFACES = ("cli", "site")

# The grader's reasons name the CLI's flags; on the site each is said as what it is there.
_SITE_WORDS = (
    ("no prices given (--price-input and --price-output, USD per million tokens)",
     "no prices given (the endpoint's prices per million input and output tokens, USD)"),
    ("no --prompts sample", "no prompt sample (upload one in the endpoint's settings)"),
    ("and no --dcgm-url was given", "and no DCGM exporter was given"),
)
# The site's workers never read the GPUs of their own machine (scans/profile.py). Reports
# stored before they said so read "the target is not on loopback", false for a loopback one.
_SITE_GPU_REASON = ("no GPU source: the site does not read GPU utilization (only a scan run "
                    "beside the server, with its DCGM exporter, can)")


def surface_text(text: Any, surface: str) -> Any:
    """`text` (a stored reason) as the surface says it: unchanged for the CLI."""
    if surface != "site" or not isinstance(text, str):
        return text
    if text.startswith(NOT_SAMPLED_HERE):
        return _SITE_GPU_REASON
    for cli, site in _SITE_WORDS:
        text = text.replace(cli, site)
    return text


def _target(report: Mapping[str, Any]) -> Mapping[str, Any]:
    target = report.get("target")
    return target if isinstance(target, Mapping) else {}


def _pillar_text(pillar: Any) -> str:
    return str(pillar or "").replace("_", " ")


def cap_text(cap_id: Any) -> str:
    """A cap as people read it (the scoring table's words), its id otherwise."""
    found = next((cap for cap in scoring.CAPS if cap.id == cap_id), None)
    return found.applies_when if found else str(cap_id)


def render_html(report: Mapping[str, Any], surface: str = "cli") -> str:
    """One self-contained HTML file for `report` (inline CSS and SVG; no network), worded for
    `surface` (one of SURFACES): the site says its own settings where the CLI names flags."""
    if surface not in SURFACES:
        raise ValueError(f"surface must be one of {SURFACES}, got {surface!r}")
    loopback = is_loopback_host(urlsplit(str(_target(report).get("base_url") or "")).hostname
                                or "")

    def words(text: Any) -> Any:
        if (surface == "site" and loopback and isinstance(text, str)
                and text.startswith("no GPU source: the target is not on loopback")):
            return _SITE_GPU_REASON
        return surface_text(text, surface)

    score = report.get("score", {})
    checks = []
    for check in report.get("checks", []):
        unit = check.get("unit", "")
        worded = {**check, "reason": words(check.get("reason"))}
        checks.append({
            **worded,
            "label": CHECK_LABELS.get(check.get("id"), check.get("id")),
            "pillar_text": _pillar_text(check.get("pillar")),
            "status_text": _status_text(worded),
            "value_text": fmt.check_value(check.get("value"), unit, _check_bounds(check)),
            "pass_text": _bound(check["pass"], unit),
            "warn_text": _bound(check["warn"], unit),
        })
    levels = []
    for lv in report.get("levels", []):
        rate = lv.get("generation_rate") or {}
        levels.append({
            **lv,
            "failed_text": ", ".join(f"{k}: {v}" for k, v in (lv.get("failed") or {}).items())
                           or "none",
            "ttft": _ms_texts(lv.get("ttft_ms")),
            "gaps": _ms_texts(lv.get("chunk_gap_ms")),
            "answer": _ms_texts(lv.get("time_to_first_answer_ms")),
            "thinking": _ms_texts(lv.get("thinking_ms")),
            "thinking_share_text": _fmt((lv.get("output") or {}).get("thinking_share_of_chunks"),
                                        "share"),
            "examples": {cls: (msg if len(msg) <= 90 else msg[:89] + "…")
                         for cls, msg in (lv.get("failure_examples") or {}).items()},
            "failure_summary": headline.level_failure_summary(lv),
            "rate_text": fmt.rate(rate.get("median") if isinstance(rate.get("median"),
                                                                  int | float) else None,
                                  rate.get("unit") or ""),
            "lag": _ms_texts(lv.get("loop_lag_ms") if isinstance(lv.get("loop_lag_ms"), dict)
                             else None),
        })
    weights = [{"pillar": k, "pillar_text": _pillar_text(k), "percent": fmt.percent(v),
                "points": _fmt((score.get("pillar_points") or {}).get(k))}
               for k, v in (score.get("effective_weight") or {}).items()]
    measurements = dict(report.get("measurements", {}))
    for key in ("cost_reason", "gpu_reason"):
        measurements[key] = words(measurements.get(key))
    report_levels = report.get("levels", [])
    cost = measurements.get("cost_per_1000_requests")
    context = {
        "report": report,
        "score": score,
        "not_counted": [{**item, "label": CHECK_LABELS.get(item.get("id"), item.get("id")),
                         "reason": words(item.get("reason"))}
                        for item in score.get("not_counted") or []],
        "caps": [{**cap, "text": (lambda t: t[:1].upper() + t[1:])(cap_text(cap.get("id")))}
                 for cap in score.get("caps_applied") or []],
        "grade": score.get("grade"),
        # A down endpoint shows "down · no grade" and its cause, never report.json's F
        "down_cause": down_cause(report) if is_down(report) else None,
        "has_letter": score.get("grade") in scoring.GRADES and not is_down(report),
        "checks": checks,
        "levels": levels,
        "weights": weights,
        "charts": headline.ttft_histograms(report_levels),
        "headline_columns": headline.COLUMNS,
        "headline_rows": headline.headline_rows(report_levels),
        "throughput_chart": headline.throughput_chart(report_levels),
        "ttft_chart": headline.ttft_chart(report_levels),
        "failure_summary": (report["failure_summary"] if "failure_summary" in report else
                            headline.scan_failure_summary(report_levels,
                                                          report.get("preflight"))),
        "preflight": report.get("preflight"),
        "started_text": _when(report.get("started_at")),
        "took_text": _took(report),
        "cost_text": (f"${cost:,.4f}" if isinstance(cost, int | float) and math.isfinite(cost)
                      else None),
        "measurements": measurements,
        "ttft_basis_text": _ttft_basis_text(measurements),
        "target": report.get("target", {}),
        "plan": report.get("plan", {}),
        "workload_lines": workload_lines(report),
        "workload": (report.get("plan") or {}).get("workload") or {},
        "slo": _slo_context(report),
        "open_loop": _open_loop_context(report),
        "surface": surface,
    }
    return rendering.render("report/report.html", context)


def _open_loop_context(report: Mapping[str, Any]) -> dict | None:
    """report.html's open-loop section (issue 22); None for a report without --rate."""
    spec = (report.get("plan") or {}).get("open_loop")
    if not isinstance(spec, Mapping):
        return None
    from scans.grader.openloop import RATE_COLUMNS, describe_open_loop, rate_flag, rate_rows

    levels = report.get("rate_levels") or []
    text = describe_open_loop(spec)
    return {"text": text[:1].upper() + text[1:],
            "columns": RATE_COLUMNS, "rows": rate_rows(levels),
            "flags": [flag for lv in levels if (flag := rate_flag(lv))]}


def _slo_context(report: Mapping[str, Any]) -> dict | None:
    """report.html's SLO section (issue 22): the objective, one row per level (the searched
    ones marked), the capacity; None for a report without an --slo."""
    slo = (report.get("plan") or {}).get("slo")
    if not isinstance(slo, Mapping):
        return None
    from scans.grader.slo import describe_capacity, describe_slo

    rows = []
    for lv in [*(report.get("levels") or []), *(report.get("search_levels") or []),
               *(report.get("rate_levels") or [])]:
        figures = lv.get("slo")
        if not isinstance(figures, Mapping):
            continue
        rps, out = figures.get("goodput_requests_per_s"), figures.get("goodput_output_per_s")
        rate = lv.get("rate_per_s")
        rows.append({
            "concurrency": (f"rate {fmt.number(rate, 'rate')}/s, from schedule"
                            if isinstance(rate, int | float) else lv.get("concurrency")),
            "searched": bool(lv.get("searched")),
            "good": f"{figures.get('good')} / {figures.get('requests')}",
            "attainment": fmt.percent(figures.get("attainment")
                                      if isinstance(figures.get("attainment"), int | float)
                                      else None),
            "verdict": "met" if figures.get("met") else "missed",
            "rps": fmt.number(rps if isinstance(rps, int | float) else None, "rate"),
            "output": fmt.rate(out if isinstance(out, int | float) else None,
                               str(figures.get("goodput_unit") or "tokens/s")),
        })
    error_rate = slo.get("error_rate")
    found = report.get("capacity")
    return {"text": describe_slo(slo), "rows": rows,
            "error_rate": fmt.percent(error_rate) if isinstance(error_rate, int | float) else None,
            "capacity": describe_capacity(found) if isinstance(found, Mapping) else None}


def _succeeded(report: Mapping[str, Any]) -> int:
    return sum(int(level.get("succeeded") or 0) for level in report.get("levels") or [])


def down_cause(report: Mapping[str, Any]) -> str:
    """Why a down endpoint is down, in one sentence (the CLI's verdict and report.html's)."""
    preflight = report.get("preflight") or {}
    if preflight.get("stopped") and preflight.get("cause"):
        return f"{preflight['cause']}; stopped before any load"
    cause = report.get("failure_summary") or {}
    sentence = cause.get("sentence") or "no request succeeded"
    example = f" (e.g. {cause['example']})" if cause.get("example") else ""
    return f"no request succeeded: {sentence}{example}"


def is_down(report: Mapping[str, Any]) -> bool:
    """The endpoint never answered: the preflight stopped the scan, or no request of any
    level succeeded. report.json still carries the grade the scoring spec gives (F under
    `no_successful_request`); neither the CLI nor the site presents it as a quality grade."""
    preflight = report.get("preflight") or {}
    if preflight.get("stopped"):
        return True
    levels = report.get("levels") or []
    return bool(levels) and sum(int(lv.get("requests") or 0) for lv in levels) > 0 \
        and _succeeded(report) == 0
