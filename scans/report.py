"""report.json and report.html.

``report_from_measurement`` is what the CLI and the Celery task call after a scan:
measurement → check values → scoring → the report dict (docs/report.schema.json). The report
never contains the API key. ``regrade`` recomputes checks and score from a stored report's
values under the current scoring code; it never re-measures. ``render_html`` renders the one
self-contained HTML file (inline CSS and SVG, no network) from scans/templates/report/report.html
with Django's template engine used standalone -- the only Django this module touches, and only
inside that function.
"""

from __future__ import annotations

import copy
import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from scans import scoring
from scans.checks import check_values, generation_rate_basis
from scans.engine.measurement import GRADED_TTFT, LevelResult, Measurement, budget_hint
from scans.engine.plan import ScanPlan
from scans.engine.prompts import PromptSample
from scans.proof import sample_times_ms
from scans.stats import percentile

__all__ = [
    "REPEAT_PROMPT_NOTE",
    "build_report",
    "cli_notes",
    "regrade",
    "render_html",
    "report_from_measurement",
    "write_report",
]

# Inside the package, so a non-editable install ships it; the site finds it too (APP_DIRS).
TEMPLATES_DIR = Path(__file__).resolve().parent / "templates"
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
        "ttft_samples_ms": [_r(t, 2) for t in ttft],
        # every chunk's arrival too, so a site can recompute the checks (scans/proof.py)
        "request_timelines": [{**r.timeline_ms(origin), **sample_times_ms(r, origin)}
                              for r in level.requests[:_TIMELINE_LIMIT]],
    }


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
    return {
        "tool_version": f"tokvera {measurement.scanner.get('version', 'unknown')}",
        "target": {"base_url": measurement.base_url, "model": measurement.model},
        "started_at": measurement.started_at,
        "finished_at": measurement.finished_at,
        "plan": plan.public_dict(),
        "levels": [_level_dict(level, basis, measurement.origin_time)
                   for level in measurement.levels],
        "checks": graded.checks,
        "measurements": measurements,
        "score": graded.score,
    }


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

_CHART_W, _CHART_H, _PAD_L, _PAD_B, _BINS = 560, 150, 40, 28, 24


def _fmt(value: Any, unit: str | None = None) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "present" if value else "absent"
    if isinstance(value, int | float):
        if unit == "share":
            return f"{value * 100:.1f}%"
        if unit == "ratio":
            return f"{value:.2f}×"
        if unit == "ms":
            return f"{value:.1f} ms"
        return f"{value:g}"
    return str(value)


def _bound(bound: Mapping[str, Any], unit: str) -> str:
    if bound["op"] == "==":
        return "present" if bound["value"] else "absent"
    op = "≤" if bound["op"] == "<=" else "≥"
    value = bound["value"]
    shown = f"{value * 100:g}%" if unit == "share" else f"{value:g}"
    return f"{op} {shown}{' ms' if unit == 'ms' else ''}"


def _ms_texts(figures: Mapping[str, Any] | None) -> dict[str, str]:
    """p50/p95/p99 (and max) as display text with one decimal; a dash when missing."""
    figures = figures or {}
    return {key: (f"{figures[key]:.1f}" if isinstance(figures.get(key), int | float) else "—")
            for key in ("p50", "p95", "p99", "max")}


def _chart(levels: Sequence[Mapping[str, Any]]) -> list[dict]:
    """Histogram geometry of each level's TTFT samples, on one shared x axis."""
    all_samples = [t for lv in levels for t in (lv.get("ttft_samples_ms") or [])]
    if not all_samples:
        return []
    low, high = min(all_samples), max(all_samples)
    if high <= low:
        high = low + 1.0
    width = (high - low) / _BINS
    plot_w = _CHART_W - _PAD_L - 10
    plot_h = _CHART_H - _PAD_B - 10
    charts = []
    for lv in levels:
        samples = lv.get("ttft_samples_ms") or []
        counts = [0] * _BINS
        for t in samples:
            counts[min(_BINS - 1, int((t - low) / width))] += 1
        top = max(counts) if samples else 0
        bars = []
        for i, count in enumerate(counts):
            if not count:
                continue
            h = plot_h * count / top
            bars.append({"x": round(_PAD_L + i * plot_w / _BINS, 2),
                         "y": round(10 + plot_h - h, 2),
                         "w": round(max(1.0, plot_w / _BINS - 1), 2), "h": round(h, 2),
                         "title": f"{low + i * width:.1f}–{low + (i + 1) * width:.1f} ms: "
                                  f"{count}"})
        markers = []
        for name, value in ((lv.get("ttft_ms") or {}).items()):
            if name in ("p50", "p95", "p99") and isinstance(value, int | float):
                x = _PAD_L + (value - low) / (high - low) * plot_w
                markers.append({"name": name, "x": round(min(_PAD_L + plot_w, x), 2),
                                "value": f"{value:.1f}"})
        charts.append({
            "concurrency": lv.get("concurrency"), "bars": bars, "markers": markers,
            "n": len(samples), "w": _CHART_W, "h": _CHART_H, "base_y": 10 + plot_h,
            "left": _PAD_L, "right": _PAD_L + plot_w,
            "low": f"{low:.0f}", "high": f"{high:.0f}", "mid": f"{(low + high) / 2:.0f}",
            "mid_x": round(_PAD_L + plot_w / 2, 2), "label_y": _CHART_H - 8,
        })
    return charts


def _engine():
    from django.conf import settings

    if not settings.configured:
        try:
            if not os.environ.get("DJANGO_SETTINGS_MODULE"):
                raise LookupError("no settings module")
            settings.USE_TZ  # noqa: B018 - loads the project's settings when they are usable
        except Exception:
            if not settings.configured:
                settings.configure(USE_TZ=True, USE_I18N=False)
    from django.template import Engine

    return Engine(dirs=[str(TEMPLATES_DIR)], autoescape=True, debug=False)


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


def render_html(report: Mapping[str, Any]) -> str:
    """One self-contained HTML file for `report` (inline CSS and SVG; no network)."""
    from django.template import Context

    score = report.get("score", {})
    checks = []
    for check in report.get("checks", []):
        unit = check.get("unit", "")
        checks.append({
            **check,
            "value_text": _fmt(check.get("value"), unit),
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
            "rate_text": (f"{rate['median']:.1f} {rate.get('unit') or ''}"
                          if isinstance(rate.get("median"), int | float) else "—"),
            "lag": _ms_texts(lv.get("loop_lag_ms") if isinstance(lv.get("loop_lag_ms"), dict)
                             else None),
        })
    weights = [{"pillar": k, "percent": f"{v * 100:.1f}%",
                "points": _fmt((score.get("pillar_points") or {}).get(k))}
               for k, v in (score.get("effective_weight") or {}).items()]
    measurements = report.get("measurements", {})
    cost = measurements.get("cost_per_1000_requests")
    context = {
        "report": report,
        "score": score,
        "grade": score.get("grade"),
        "has_letter": score.get("grade") in scoring.GRADES,
        "checks": checks,
        "levels": levels,
        "weights": weights,
        "charts": _chart(report.get("levels", [])),
        "cost_text": (f"${cost:,.4f}" if isinstance(cost, int | float) and math.isfinite(cost)
                      else None),
        "measurements": measurements,
        "ttft_basis_text": _ttft_basis_text(measurements),
        "target": report.get("target", {}),
        "plan": report.get("plan", {}),
    }
    template = _engine().get_template("report/report.html")
    return template.render(Context(context))
