"""The /benchmarks page and its methodology as HTML: how each figure of the snapshot is written."""

from __future__ import annotations

import functools
import json
from datetime import datetime
from decimal import Decimal
from pathlib import Path

from django.template.loader import render_to_string
from django.utils.text import slugify

from benchmarks.public import snapshot as snap

# Package data (a link to docs/methodology.md in a checkout, the file itself in a wheel).
METHODOLOGY_PATH = Path(__file__).resolve().parent / "methodology.md"


EM_DASH = "\u2014"


def attr(value) -> str:
    """A figure as a data attribute: written as the JSON writes it, empty when there is none."""
    return "" if value is None else json.dumps(value)


def percent(share: float | None) -> str:
    """A share as a percentage with one decimal. Only exactly 1 reads 100 % and only exactly 0
    reads 0 %: 0.9996 is 99.9 %, not a rounded-up perfect score."""
    if share is None:
        return EM_DASH
    text = f"{snap.half_up(Decimal(repr(share)) * 100, 1):.1f}"
    if text == "100.0" and share < 1:
        text = "99.9"
    elif text == "0.0" and share > 0:
        text = "0.1"
    return f"{text}\u00a0%"


def millis(value: int | None) -> str:
    return EM_DASH if value is None else f"{value:,}\u00a0ms"


def speed(value: float | None) -> str:
    return EM_DASH if value is None else f"{value:,.1f}\u00a0tok/s"


TIER_LABELS = {"none": "None", "software": "Software", "edr": "EDR", "hardware": "Hardware"}


WINDOW_LABELS = {"7d": "7 days", "30d": "30 days"}


def page_context(snapshot: dict) -> dict:
    models = []
    for m in snapshot["models"]:
        windows = []
        for name, w in m["windows"].items():
            latency = w["latency"]
            windows.append({
                "name": name, "label": WINDOW_LABELS.get(name, name),
                "completed": w["completed"], "failed": w["failed"],
                "settled": w["completed"] + w["failed"], "no_host": w["no_host"],
                "success": percent(w["success_rate"]), "success_attr": attr(w["success_rate"]),
                "p50": millis(latency["p50_ms"]), "p50_attr": attr(latency["p50_ms"]),
                "p95": millis(latency["p95_ms"]), "p95_attr": attr(latency["p95_ms"]),
            })
        tiers = [{
            "tier": t["tier"], "label": TIER_LABELS.get(t["tier"], t["tier"]), "hosts": t["hosts"],
            "ttft_p50": millis(t["ttft_p50_ms"]), "ttft_p50_attr": attr(t["ttft_p50_ms"]),
            "ttft_p95": millis(t["ttft_p95_ms"]), "ttft_p95_attr": attr(t["ttft_p95_ms"]),
            "tps_p50": speed(t["tps_p50"]), "tps_p50_attr": attr(t["tps_p50"]),
        } for t in m["tiers"]]
        models.append({
            "id": m["id"], "display_name": m["display_name"], "quant": m["quant"],
            "context_len": f"{m['context_len']:,}", "online_hosts": m["online_hosts"],
            "success_7d_attr": attr(m["windows"]["7d"]["success_rate"]),
            "windows": windows, "tiers": tiers,
            # Hosts online yet a dash: the privacy floor holds the figure back, said beside it.
            "held_back": any(t["hosts"] and not t["ttft_p50_attr"] for t in tiers),
        })
    generated = datetime.fromisoformat(snapshot["generated_at"].replace("Z", "+00:00"))
    return {
        "generated_at": snapshot["generated_at"],
        "generated_label": generated.strftime("%Y-%m-%d %H:%M:%S UTC"),
        "online_hosts": snapshot["online_hosts"],
        "sparse": snapshot["sparse"],
        "models": models,
        "hardware": snapshot["hardware"],
        "gpu_kinds": snap.gpu_models_online(snapshot["hardware"]),
        "ewma_alpha": snap.EWMA_ALPHA,
        "min_operators": snap.MIN_OPERATORS,
        "min_cell_hosts": snap.MIN_HOSTS_PER_CELL,
    }


def render_page(snapshot: dict) -> str:
    # No request: no context processor runs, so nothing reads the session or the user.
    return render_to_string("benchmarks/benchmarks.html", page_context(snapshot))


@functools.lru_cache(maxsize=4)
def methodology_html(mtime_ns: int) -> str:
    from markdown_it import MarkdownIt

    md = MarkdownIt("js-default")  # tables; raw HTML in the Markdown is escaped
    tokens = md.parse(METHODOLOGY_PATH.read_text(encoding="utf-8"))
    for i, token in enumerate(tokens):
        if token.type == "heading_open":  # linkable sections: #cache-and-privacy
            token.attrSet("id", slugify(tokens[i + 1].content))
    body = md.renderer.render(tokens, md.options, {})
    return render_to_string("benchmarks/methodology.html", {"body": body})
