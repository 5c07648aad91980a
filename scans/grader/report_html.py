"""report.html: one self-contained page per report (inline CSS and SVG, no network), worded for
the surface that shows it (the CLI's file or the site's scan page). The words themselves are
report_text.py's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from scans.grader import formatting as fmt
from scans.grader import headline, rendering, scoring
from scans.grader.probes import is_loopback_host
from scans.grader.report_text import (
    RATE_COLUMNS,
    SITE_GPU_REASON,
    SURFACES,
    agent_figure_rows,
    agent_shape_text,
    cap_text,
    describe_capacity,
    describe_open_loop,
    describe_slo,
    down_cause,
    is_down,
    ms_texts,
    rate_flag,
    rate_rows,
    server_text,
    surface_text,
    trace_flag,
    trace_rows,
    ttft_basis_text,
    workload_lines,
)
from scans.grader.scoring import CHECK_LABELS

__all__ = ["STATUS_LABELS", "render_html"]


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
        if rest and " " not in head.strip():  # "client_bound: the grader's …": the words
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


def _bound_note(check: Mapping[str, Any]) -> str:
    """What a check's bounds were computed for, where they follow the workload."""
    notes = []
    if isinstance(check.get("input_tokens"), int | float):
        notes.append(f"bounds for a {check['input_tokens']:,.0f}-token prompt")
    within = check.get("loaded_within")
    if isinstance(within, Mapping) and isinstance(check.get("loaded_p99_ms"), int | float):
        notes.append(f"loaded p99 {check['loaded_p99_ms']:,.0f} ms: within "
                     f"{within['pass']:,.0f} ms passes, {within['warn']:,.0f} ms warns, "
                     "whatever the ratio")
    return "; ".join(notes)


def _bound(bound: Mapping[str, Any], unit: str) -> str:
    return fmt.bound_text(bound["op"], bound["value"], unit)


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


def _target(report: Mapping[str, Any]) -> Mapping[str, Any]:
    target = report.get("target")
    return target if isinstance(target, Mapping) else {}


def _pillar_text(pillar: Any) -> str:
    return str(pillar or "").replace("_", " ")


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
            return SITE_GPU_REASON
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
            "bound_note": _bound_note(check),
        })
    levels = []
    for lv in report.get("levels", []):
        rate = lv.get("generation_rate") or {}
        levels.append({
            **lv,
            "failed_text": ", ".join(f"{k}: {v}" for k, v in (lv.get("failed") or {}).items())
                           or "none",
            "ttft": ms_texts(lv.get("ttft_ms")),
            "gaps": ms_texts(lv.get("chunk_gap_ms")),
            "answer": ms_texts(lv.get("time_to_first_answer_ms")),
            "thinking": ms_texts(lv.get("thinking_ms")),
            "thinking_share_text": _fmt((lv.get("output") or {}).get("thinking_share_of_chunks"),
                                        "share"),
            "examples": {cls: (msg if len(msg) <= 90 else msg[:89] + "…")
                         for cls, msg in (lv.get("failure_examples") or {}).items()},
            "failure_summary": headline.level_failure_summary(lv),
            "rate_text": fmt.rate(rate.get("median") if isinstance(rate.get("median"),
                                                                  int | float) else None,
                                  rate.get("unit") or ""),
            "lag": ms_texts(lv.get("loop_lag_ms") if isinstance(lv.get("loop_lag_ms"), dict)
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
        "ttft_basis_text": ttft_basis_text(measurements),
        "target": report.get("target", {}),
        # what the server says of itself, beside the grade; reports from before have none
        "server_text": server_text(report["server"]) if "server" in report else None,
        "plan": report.get("plan", {}),
        "workload_lines": workload_lines(report),
        "workload": (report.get("plan") or {}).get("workload") or {},
        "slo": _slo_context(report),
        "open_loop": _open_loop_context(report),
        "trace_replay": _trace_context(report),
        "agent": _agent_context(report),
        "surface": surface,
    }
    return rendering.render("report/report.html", context)


def _open_loop_context(report: Mapping[str, Any]) -> dict | None:
    """report.html's open-loop section; None for a report without --rate."""
    spec = (report.get("plan") or {}).get("open_loop")
    if not isinstance(spec, Mapping):
        return None
    levels = report.get("rate_levels") or []
    text = describe_open_loop(spec)
    return {"text": text[:1].upper() + text[1:],
            "columns": RATE_COLUMNS, "rows": rate_rows(levels),
            "flags": [flag for lv in levels if (flag := rate_flag(lv))]}


def _agent_context(report: Mapping[str, Any]) -> dict | None:
    """report.html's agent-shaped section: the load asked and, per level that sent that shape,
    its per-turn, tool-call and structured-output figures; None for a scan without one."""
    agent = ((report.get("plan") or {}).get("workload") or {}).get("agent")
    levels = [{"concurrency": lv.get("concurrency"), "rows": rows}
              for lv in report.get("levels") or [] if (rows := agent_figure_rows(lv))]
    if not isinstance(agent, Mapping) and not levels:
        return None
    text = agent_shape_text(agent) if isinstance(agent, Mapping) else ""
    return {"text": text[:1].upper() + text[1:], "levels": levels}


def _trace_context(report: Mapping[str, Any]) -> dict | None:
    """report.html's trace replay section; None for a report without one."""
    trace = report.get("trace_replay")
    if not isinstance(trace, Mapping):
        return None
    flag = trace_flag(trace)
    return {"rows": trace_rows(trace), "flags": [f"Trace replay: {flag}"] if flag else []}


def _slo_context(report: Mapping[str, Any]) -> dict | None:
    """report.html's SLO section: the objective, one row per level (the searched
    ones marked), the capacity; None for a report without an --slo."""
    slo = (report.get("plan") or {}).get("slo")
    if not isinstance(slo, Mapping):
        return None
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
