"""A report in words: the sentences and display rows that the CLI, report.html and the site
all show (one wording, read from report.json), and the verdict they rest on (``is_down``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from scans.grader import formatting as fmt
from scans.grader import scoring
from scans.grader.probes import NOT_SAMPLED_HERE

__all__ = [
    "RATE_COLUMNS",
    "SITE_GPU_REASON",
    "SURFACES",
    "agent_figure_rows",
    "agent_lines",
    "agent_shape_text",
    "cap_text",
    "cli_notes",
    "comparability",
    "describe_capacity",
    "describe_open_loop",
    "describe_slo",
    "down_cause",
    "embeddings_lines",
    "goodput_text",
    "is_down",
    "ms_texts",
    "rate_flag",
    "rate_rows",
    "server_changes",
    "server_text",
    "surface_text",
    "trace_flag",
    "trace_lines",
    "trace_rows",
    "ttft_basis_text",
    "workload_key",
    "workload_lines",
]


def _num(value: Any) -> float | None:
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None


# -- the verdict ---------------------------------------------------------------------------------

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


# -- the scan ------------------------------------------------------------------------------------

def ms_texts(figures: Mapping[str, Any] | None) -> dict[str, str]:
    """p50/p95/p99 (and max) as display text in ms (no unit); a dash when missing."""
    figures = figures or {}
    return {key: fmt.number(figures[key] if isinstance(figures.get(key), int | float)
                            else None, "ms")
            for key in ("p50", "p95", "p99", "max")}


def ttft_basis_text(measurements: Mapping[str, Any]) -> str:
    """Which time the graded TTFT checks read; reports older than reasoning support
    have no ``ttft_basis`` and read the first content chunk (no thinking was parsed then)."""
    basis = measurements.get("ttft_basis")
    if isinstance(basis, Mapping) and basis.get("graded") == "first_output_token":
        return "the first output token"
    return "the first content chunk (a report from before thinking was parsed)"


def cli_notes(report: Mapping[str, Any]) -> list[str]:
    """The lines `tokvera scan` prints about the server, which TTFT was graded and
    thinking."""
    measurements = report.get("measurements") or {}
    lines = [f"server: {server_text(report['server'])}"] if "server" in report else []
    if (report.get("plan") or {}).get("api") != "embeddings":  # no stream, no TTFT
        lines.append(f"TTFT is graded at {ttft_basis_text(measurements)} (thinking included)")
    reasoning = measurements.get("reasoning")
    if isinstance(reasoning, Mapping):
        for lv in report.get("levels", []):
            answer = ms_texts(lv.get("time_to_first_answer_ms"))
            thinking = ms_texts(lv.get("thinking_ms"))
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
    if plan.get("api", "chat") != "chat":
        shape += f" (--api {plan['api']})"
    if plan.get("api") == "embeddings":  # no reply: max_tokens is not sent
        lines = [f"{grade} at {levels} × {per}, {sent_in} embedded{shape}"]
    else:
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
    return lines + embeddings_lines(report) + agent_lines(report)


def embeddings_lines(report: Mapping[str, Any]) -> list[str]:
    """An embeddings scan's latency and throughput, a line per level (it has no TTFT)."""
    lines = []
    for lv in report.get("levels") or []:
        figures = lv.get("embeddings")
        if not isinstance(figures, Mapping):
            continue
        latency = (figures.get("latency_ms") or {}).get("p50")
        text = (f"embeddings at {lv.get('concurrency')}: p50 "
                f"{fmt.ms(latency) if latency is not None else '—'}")
        if isinstance(figures.get("inputs_per_s"), int | float):
            text += f", {figures['inputs_per_s']:,.1f} inputs/s"
        if isinstance(figures.get("tokens_per_s"), int | float):
            text += f", {figures['tokens_per_s']:,.0f} tokens/s"
        lines.append(text + " (no stream: no TTFT)")
    return lines


#: A session kind of a mix (agent_load.SESSION_KINDS) as people read it.
_KIND_WORDS = {"tools": "tool calls", "structured_output": "JSON schema", "chat": "plain chat"}


def _agent(report: Mapping[str, Any]) -> Mapping[str, Any] | None:
    agent = ((report.get("plan") or {}).get("workload") or {}).get("agent")
    return agent if isinstance(agent, Mapping) else None


def agent_shape_text(agent: Mapping[str, Any]) -> str:
    """The agent-shaped load asked, in one line: "sessions of 4 turns, 500 ms think time;
    tools builtin (tool_choice auto); JSON schema builtin; sessions cycle tool calls → JSON
    schema → plain chat"."""
    turns = agent.get("turns")
    parts = []
    if isinstance(turns, int) and turns > 1:
        think = agent.get("think_time_ms")
        pause = (f", {fmt.number(think, 'ms')} ms think time"
                 if isinstance(think, int | float) and think else "")
        parts.append(f"sessions of {turns} turns{pause}")
    tools = agent.get("tools")
    if isinstance(tools, Mapping):
        parts.append(f"tools {tools.get('source')} (tool_choice {tools.get('tool_choice')})")
    schema = agent.get("structured_output")
    if isinstance(schema, Mapping):
        parts.append(f"JSON schema {schema.get('source')}")
    mix = agent.get("mix")
    if isinstance(mix, list) and mix:
        parts.append("sessions cycle " + " → ".join(_KIND_WORDS.get(str(k), str(k))
                                                    for k in mix))
    return "; ".join(parts) or "single requests"


def _share_text(value: Any) -> str:
    return fmt.percent(value) if isinstance(value, int | float) else "—"


def agent_figure_rows(level: Mapping[str, Any]) -> list[tuple[str, str]]:
    """A level's agent-shaped figures as (what, value) rows (report.html), each measured and
    not graded; empty when the level sent no such shape."""
    rows = []
    for turn in level.get("turns") or []:
        ttft = ms_texts(turn.get("ttft_ms"))
        rows.append((f"Turn {turn.get('turn')}",
                     f"TTFT p50 {ttft['p50']} ms, p95 {ttft['p95']} ms; "
                     f"{_share_text(turn.get('cached_share'))} of the prompt cached; "
                     f"{turn.get('succeeded')} of {turn.get('requests')} succeeded"))
    calls = level.get("tool_calls")
    if isinstance(calls, Mapping):
        rows.append(("Tool calls",
                     f"{calls.get('called')} calls in {calls.get('replies_with_calls')} of "
                     f"{calls.get('requests')} replies: {_share_text(calls.get('parsed_share'))}"
                     f" parsed, {_share_text(calls.get('named_share'))} named a declared tool, "
                     f"{_share_text(calls.get('valid_share'))} valid"))
    structured = level.get("structured_output")
    if isinstance(structured, Mapping):
        rows.append(("JSON replies",
                     f"Of {structured.get('requests')} replies: "
                     f"{_share_text(structured.get('parsed_share'))} parsed, "
                     f"{_share_text(structured.get('valid_share'))} valid for the schema"))
    return rows


def agent_lines(report: Mapping[str, Any]) -> list[str]:
    """The agent-shaped load asked (its mix named), then one line per agent-shaped figure of
    the top level: cached share by turn, tool calls and structured output that were valid
    (measured, not graded)."""
    agent = _agent(report)
    lines = [f"agent-shaped: {agent_shape_text(agent)}"] if agent is not None else []
    levels = report.get("levels") or []
    if not levels:
        return lines
    top = levels[-1]
    at = f"at {top.get('concurrency')}"
    turns = top.get("turns") or []
    if turns:
        shares = " → ".join(fmt.percent(t["cached_share"])
                            if isinstance(t.get("cached_share"), int | float) else "–"
                            for t in turns)
        lines.append(f"conversations of {len(turns)} turns {at}: cached share by turn {shares}")
    for name, label in (("tool_calls", "tool calls"), ("structured_output", "JSON replies")):
        figures = top.get(name)
        if figures and isinstance(figures.get("valid_share"), int | float):
            lines.append(f"{label} {at}: {fmt.percent(figures['valid_share'])} valid "
                         f"(parsed {fmt.percent(figures.get('parsed_share'))})")
    return lines


def workload_key(report: Mapping[str, Any]) -> dict:
    """What must match for two reports' figures to be compared: the workload asked (not the
    nonce's value, not how prompts were sized). A report older than the workload options sent
    the same built-in prompts every scan, without a nonce."""
    plan = report.get("plan") or {}
    work = plan.get("workload")
    api = plan.get("api", "chat")  # reports from before --api spoke chat
    if not isinstance(work, Mapping):
        return {"api": api, "nonce": False, "input_tokens": None, "input_distribution": None,
                "output_tokens": None, "shared_prefix_tokens": None, "dataset": None,
                "max_tokens": plan.get("max_tokens"), "warmup": 0, "preset": None, "turns": 1,
                "think_time_ms": 0, "tools": None, "json_schema": None, "mix": None}
    dataset = work.get("dataset") or None
    spread = work.get("input_distribution")
    found = work.get("agent")
    agent: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    tools = agent.get("tools") if isinstance(agent.get("tools"), Mapping) else None
    schema = (agent.get("structured_output")
              if isinstance(agent.get("structured_output"), Mapping) else None)
    named = work.get("preset")
    preset: Mapping[str, Any] = named if isinstance(named, Mapping) else {}
    mix = agent.get("mix")
    return {"api": api, "nonce": True, "input_tokens": work.get("input_tokens"),
            "input_distribution": ({k: spread.get(k) for k in ("kind", "min", "max", "mean", "sd",
                                                                "seed")}
                                   if isinstance(spread, Mapping) else None),
            "output_tokens": work.get("output_tokens"),
            "shared_prefix_tokens": work.get("shared_prefix_tokens"),
            "dataset": ({"lines": dataset.get("lines"), "sha256": dataset.get("sha256")}
                        if isinstance(dataset, Mapping) else None),
            "max_tokens": plan.get("max_tokens"), "warmup": work.get("warmup", 0),
            # The agent shape: a single-turn scan has 1 turn, no think time, neither.
            "preset": preset.get("name"),
            "turns": agent.get("turns", 1), "think_time_ms": agent.get("think_time_ms", 0),
            "tools": (f"{tools.get('source')} (tool_choice {tools.get('tool_choice')})"
                      if tools else None),
            "json_schema": schema.get("source") if schema else None,
            "mix": " → ".join(str(kind) for kind in mix) if isinstance(mix, list) else None}


def _key_text(value: Any) -> str:
    """A workload field as a reader reads it ("not set", never Python's None)."""
    if value is None:
        return "not set"
    return value if isinstance(value, str) else repr(value)


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


# -- the server's identity ----------------------------------------------------------------------

def _parameters_text(count: Any) -> str | None:
    if not isinstance(count, int) or isinstance(count, bool) or count <= 0:
        return None
    for size, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M")):
        if count >= size:
            return f"{count / size:.3g}{suffix} parameters"
    return f"{count:,} parameters"


def _gpus_text(names: Any) -> str | None:
    """["NVIDIA H100", "NVIDIA H100"] → "2 × NVIDIA H100"."""
    if not isinstance(names, list) or not names:
        return None
    counts: dict[str, int] = {}
    for name in names:
        counts[str(name)] = counts.get(str(name), 0) + 1
    return ", ".join(f"{n} × {name}" if n > 1 else name for name, n in counts.items())


def server_text(server: Mapping[str, Any] | None) -> str:
    """What the server says of itself in one line: "vLLM 0.11.0 · Qwen3-8B · ctx 32,768 ·
    NVIDIA H100"; "not stated" when it says nothing (the CLI's ``server:`` line, report.html
    beside the grade, the site)."""
    if not isinstance(server, Mapping):
        return "not stated"
    model: Mapping[str, Any] = server["model"] if isinstance(server.get("model"), Mapping) else {}
    hardware: Mapping[str, Any] = (server["hardware"] if isinstance(server.get("hardware"), Mapping)
                                   else {})
    engine = " ".join(str(part) for part in (server.get("engine"), server.get("engine_version"))
                      if part)
    context = model.get("max_model_len")
    tensor_parallel = hardware.get("tensor_parallel_size")
    parts = [
        engine,
        model.get("id"),
        f"ctx {context:,}" if isinstance(context, int) and not isinstance(context, bool) else None,
        model.get("quantization") or model.get("dtype"),
        _parameters_text(model.get("parameters")),
        _gpus_text(hardware.get("gpu_names")) or hardware.get("device"),
        f"tensor parallel {tensor_parallel}" if isinstance(tensor_parallel, int) else None,
    ]
    shown = [str(part) for part in parts if part]
    return " · ".join(shown) if shown else "not stated"


#: What a change of identity is called, per fact (engine first: it explains the others).
_IDENTITY_FACTS = (
    ("engine", ("engine",)),
    ("engine version", ("engine_version",)),
    ("model", ("model", "root")),
    ("context length", ("model", "max_model_len")),
    ("dtype", ("model", "dtype")),
    ("quantization", ("model", "quantization")),
    ("parameters", ("model", "parameters")),
)
_HARDWARE_FACTS = (("GPUs", "gpu_names"), ("device", "device"),
                   ("tensor parallel size", "tensor_parallel_size"), ("KV cache", "kv_cache"))


def _fact(server: Mapping[str, Any] | None, path: Sequence[str]) -> Any:
    value: Any = server
    for key in path:
        value = value.get(key) if isinstance(value, Mapping) else None
    return value


def _fact_text(value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    if isinstance(value, list):
        return _gpus_text(value) or "none"
    if isinstance(value, Mapping):
        return ", ".join(f"{k} {v}" for k, v in value.items())
    return str(value)


def server_changes(before: Mapping[str, Any] | None,
                   after: Mapping[str, Any] | None) -> list[str]:
    """What changed between two scans' ``server`` (earlier, later), one phrase per fact:
    "engine version 0.10.2 → 0.11.0", "hardware changed (GPUs NVIDIA A100 → NVIDIA H100)".
    Only a fact both scans state counts: one the server did not state (an older report, a
    request that timed out) is unknown, not a change. Empty when nothing changed."""
    changes = []
    for label, path in _IDENTITY_FACTS:
        old, new = _fact(before, path), _fact(after, path)
        if old is not None and new is not None and old != new:
            changes.append(f"{label} {_fact_text(old)} → {_fact_text(new)}")
    hardware = []
    for label, key in _HARDWARE_FACTS:
        old, new = _fact(before, ("hardware", key)), _fact(after, ("hardware", key))
        if old is not None and new is not None and old != new:
            hardware.append(f"{label} {_fact_text(old)} → {_fact_text(new)}")
    if hardware:
        changes.append(f"hardware changed ({'; '.join(hardware)})")
    return changes


def cap_text(cap_id: Any) -> str:
    """A cap as people read it (the scoring table's words), its id otherwise."""
    found = next((cap for cap in scoring.CAPS if cap.id == cap_id), None)
    return found.applies_when if found else str(cap_id)


# -- the surface ---------------------------------------------------------------------------------

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


# The site's workers never read the GPUs of their own machine (scans/endpoints/profile.py). Reports
# stored before they said so read "the target is not on loopback", false for a loopback one.
SITE_GPU_REASON = ("no GPU source: the site does not read GPU utilization (only a scan run "
                    "beside the server, with its DCGM exporter, can)")


def surface_text(text: Any, surface: str) -> Any:
    """`text` (a stored reason) as the surface says it: unchanged for the CLI."""
    if surface != "site" or not isinstance(text, str):
        return text
    if text.startswith(NOT_SAMPLED_HERE):
        return SITE_GPU_REASON
    for cli, site in _SITE_WORDS:
        text = text.replace(cli, site)
    return text


# -- the objective and the capacity --------------------------------------------------------------

def describe_slo(slo: Mapping[str, Any]) -> str:
    """``plan.slo`` in words: "TTFT ≤ 80.0 ms, error rate ≤ 1.0 %, for 95.0 % of requests"."""
    names = {"ttft_p95_ms": "TTFT", "itl_p95_ms": "inter-chunk p95",
             "e2e_p95_ms": "end-to-end"}
    parts = [f"{label} ≤ {fmt.ms(_num(slo.get(key)))}" for key, label in names.items()
             if _num(slo.get(key)) is not None]
    if _num(slo.get("error_rate")) is not None:
        parts.append(f"error rate ≤ {fmt.percent(_num(slo.get('error_rate')))}")
    return f"{', '.join(parts)}, for {fmt.percent(_num(slo.get('attainment')))} of requests"


def goodput_text(rps: Any, out: Any, unit: Any) -> str:
    return (f"{fmt.rate(_num(rps), 'requests/s')}, "
            f"{fmt.rate(_num(out), str(unit or 'tokens/s'))}")


def describe_capacity(found: Mapping[str, Any]) -> str:
    """report.json's ``capacity`` in words (the CLI's line and report.html's)."""
    tried = "/".join(str(c) for c in found.get("levels_tried") or [])
    if found.get("concurrency") is None:
        return f"none, {found.get('reason')}; tried {tried}"
    flag = (" (met at the highest level tried: the search stopped at its bound, the capacity "
            "may be higher)" if found.get("bound_reached") else "")
    return (f"{found['concurrency']} concurrent requests within the SLO{flag}; goodput "
            + goodput_text(found.get("requests_per_s"), found.get("output_tokens_per_s"),
                           found.get("output_unit"))
            + f"; tried {tried}")


# -- open-loop rate levels -----------------------------------------------------------------------

def _p(figures: Any, key: str) -> float | None:
    return _num(figures.get(key)) if isinstance(figures, Mapping) else None


def rate_flag(lv: Mapping[str, Any]) -> str | None:
    """Why a rate level's figures are the grader's more than the server's, in words (the
    CLI's line), or None when it held the rate and its event loop kept up."""
    rate = f"rate {fmt.number(_num(lv.get('rate_per_s')), 'rate')}/s"
    if not lv.get("rate_held", True):
        return (
            f"{rate}: not held by the scanner (achieved "
            f"{fmt.number(_num(lv.get('achieved_rate_per_s')), 'rate')}/s, send lag p95 "
            f"{fmt.ms(_p(lv.get('send_lag_ms'), 'p95'))}): client-bound, its figures say "
            "more about this machine than about the server"
        )
    if lv.get("client_bound"):
        return (
            f"{rate}: client-bound (the scanner's event loop lagged, p99 "
            f"{fmt.ms(_p(lv.get('loop_lag_ms'), 'p99'))})"
        )
    return None


#: (key, column title, unit) of the rate-level table (the CLI's and report.html's).
RATE_COLUMNS = (
    ("rate", "Rate/s", ""),
    ("achieved", "Achieved/s", ""),
    ("requests", "Requests", ""),
    ("succeeded", "Succeeded", ""),
    ("ttft_p50_schedule", "TTFT p50 from schedule", "ms"),
    ("ttft_p95_schedule", "TTFT p95 from schedule", "ms"),
    ("ttft_p95_write", "TTFT p95 from write", "ms"),
    ("e2e_p95_schedule", "End-to-end p95 from schedule", "ms"),
    ("e2e_p95_write", "End-to-end p95 from write", "ms"),
    ("peak", "Peak in flight", ""),
    ("waited", "Waited for a connection", ""),
    ("held", "Rate held", ""),
)


def rate_rows(levels: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    """One row of display text per rate level (keys of ``RATE_COLUMNS``)."""
    rows = []
    for lv in levels:
        held = "yes" if lv.get("rate_held", True) else "NO (client-bound)"
        if lv.get("rate_held", True) and lv.get("client_bound"):
            held = "yes (loop lagged)"
        rows.append(
            {
                "rate": fmt.number(_num(lv.get("rate_per_s")), "rate"),
                "achieved": fmt.number(_num(lv.get("achieved_rate_per_s")), "rate"),
                "requests": str(lv.get("requests", "")),
                "succeeded": str(lv.get("succeeded", "")),
                "ttft_p50_schedule": fmt.number(_p(lv.get("ttft_from_schedule_ms"), "p50"), "ms"),
                "ttft_p95_schedule": fmt.number(_p(lv.get("ttft_from_schedule_ms"), "p95"), "ms"),
                "ttft_p95_write": fmt.number(_p(lv.get("ttft_ms"), "p95"), "ms"),
                "e2e_p95_schedule": fmt.number(_p(lv.get("e2e_from_schedule_ms"), "p95"), "ms"),
                "e2e_p95_write": fmt.number(_p(lv.get("e2e_latency_ms"), "p95"), "ms"),
                "peak": str(lv.get("peak_in_flight", lv.get("concurrency", ""))),
                "waited": str(lv.get("waited_for_connection", 0)),
                "held": held,
            }
        )
    return rows


def describe_open_loop(plan_open_loop: Mapping[str, Any]) -> str:
    """``plan.open_loop`` in words: "poisson arrivals (seed 0), 80/800 requests, no connection
    limit"."""
    arrival = str(plan_open_loop.get("arrival"))
    if arrival == "gamma":
        arrival = f"gamma (burstiness {plan_open_loop.get('burstiness'):g})"
    counts = plan_open_loop.get("requests_per_level") or []
    per = "/".join(str(c) for c in counts)
    limit = plan_open_loop.get("max_connections")
    connections = f"at most {limit} connections" if isinstance(limit, int) else "no connection limit"
    return f"{arrival} arrivals (seed {plan_open_loop.get('seed')}), {per} requests, {connections}"


# -- the trace replay ----------------------------------------------------------------------------

def _failed_text(failed: Any) -> str:
    if not isinstance(failed, Mapping) or not failed:
        return "none failed"
    return "failed: " + ", ".join(f"{kind} {count}" for kind, count in failed.items())


def trace_flag(trace: Mapping[str, Any]) -> str | None:
    """Why the trace replay's figures are the grader's more than the server's, or None."""
    if not trace.get("schedule_held", True):
        return ("not held by the scanner (send lag p95 "
                f"{fmt.ms(_p(trace.get('send_lag_ms'), 'p95'))}): client-bound, its figures "
                "say more about this machine than about the server")
    if trace.get("client_bound"):
        return (f"client-bound (the scanner's event loop lagged, p99 "
                f"{fmt.ms(_p(trace.get('loop_lag_ms'), 'p99'))})")
    return None


def trace_lines(report: Mapping[str, Any]) -> list[str]:
    """The trace replay in a few sentences (the CLI's lines, each wrapped by its caller); none
    without one."""
    trace = report.get("trace_replay")
    if not isinstance(trace, Mapping):
        return []
    speed = _num(trace.get("speed")) or 1.0
    ttft = trace.get("ttft_from_schedule_ms")
    lines = [
        f"trace replay (not graded): {trace.get('file')} ({trace.get('shape')}, sha256 "
        f"{str(trace.get('sha256'))[:12]}), {trace.get('requests')} requests at {speed:g}× "
        f"over {fmt.seconds(_num(trace.get('span_s')))}, offered "
        f"{fmt.rate(_num(trace.get('offered_rate_per_s')), 'requests/s')}, achieved "
        f"{fmt.rate(_num(trace.get('achieved_rate_per_s')), 'requests/s')}",
        f"trace: {trace.get('succeeded')} of {trace.get('requests')} succeeded, "
        f"{_failed_text(trace.get('failed'))}; from schedule TTFT p50 {fmt.ms(_p(ttft, 'p50'))}, "
        f"p95 {fmt.ms(_p(ttft, 'p95'))}, end-to-end p95 "
        f"{fmt.ms(_p(trace.get('e2e_from_schedule_ms'), 'p95'))}; ITL p95 "
        f"{fmt.ms(_p(trace.get('chunk_gap_ms'), 'p95'))}",
    ]
    error = trace.get("input_length_error") or {}
    cached = _num(trace.get("cached_prompt_share"))
    lines.append(
        f"trace: {fmt.percent(_num(trace.get('shared_block_share')))} of input tokens in shared "
        f"blocks, {fmt.percent(cached)} served from the server's cache; "
        f"{error.get('within_tolerance', 0)} of {error.get('counted', 0)} prompts within "
        "tolerance of the trace's length (the server's count)")
    if trace.get("waited_for_connection"):
        lines.append(f"trace: {trace['waited_for_connection']} requests waited for a connection "
                     f"(--max-connections {trace.get('max_connections')}), counted in the "
                     "latency from schedule")
    if (flag := trace_flag(trace)) is not None:
        lines.append(f"trace: {flag}")
    return lines


def trace_rows(trace: Mapping[str, Any]) -> list[tuple[str, str]]:
    """report.html's trace replay table: (what, value) rows."""
    ttft = trace.get("ttft_from_schedule_ms")
    e2e = trace.get("e2e_from_schedule_ms")
    error = trace.get("input_length_error") or {}
    preparation = trace.get("preparation") or {}
    output = preparation.get("output_length") or {}
    rows = [
        ("Trace", f"{trace.get('file')} ({trace.get('shape')}), sha256 {trace.get('sha256')}"),
        ("Speed", f"{_num(trace.get('speed')) or 1.0:g}× (span "
                  f"{fmt.seconds(_num(trace.get('span_s')))})"),
        ("Requests", f"{trace.get('requests')} sent, {trace.get('succeeded')} succeeded, "
                     f"{_failed_text(trace.get('failed'))}"),
        ("Rate offered / achieved",
         f"{fmt.rate(_num(trace.get('offered_rate_per_s')), 'requests/s')} / "
         f"{fmt.rate(_num(trace.get('achieved_rate_per_s')), 'requests/s')}"),
        ("TTFT from schedule (p50 / p95 / p99)",
         " / ".join(fmt.ms(_p(ttft, k)) for k in ("p50", "p95", "p99"))),
        ("TTFT from write (p50 / p95)",
         " / ".join(fmt.ms(_p(trace.get("ttft_ms"), k)) for k in ("p50", "p95"))),
        ("ITL, chunk gap (p50 / p95)",
         " / ".join(fmt.ms(_p(trace.get("chunk_gap_ms"), k)) for k in ("p50", "p95"))),
        ("End-to-end from schedule (p50 / p95 / p99)",
         " / ".join(fmt.ms(_p(e2e, k)) for k in ("p50", "p95", "p99"))),
        ("Send lag (p95)", fmt.ms(_p(trace.get("send_lag_ms"), "p95"))),
        ("Peak in flight / waited for a connection",
         f"{trace.get('peak_in_flight')} / {trace.get('waited_for_connection', 0)}"),
        ("Input tokens in shared blocks", fmt.percent(_num(trace.get("shared_block_share")))),
        ("Prompt tokens served from cache", fmt.percent(_num(trace.get("cached_prompt_share")))),
        ("Prompts within tolerance of the trace's length",
         f"{error.get('within_tolerance', 0)} of {error.get('counted', 0)} (p50 off by "
         f"{fmt.number(_num(error.get('p50')), 'rate')} tokens)"),
        ("Reply length", str(output.get("note") or "—")),
    ]
    return rows


#: --stop-on-saturation's reasons in words.
SATURATION_REASONS = {
    "error_burst": "error burst",
    "queue_growth": "growing queue",
}


def saturation_lines(report: Mapping[str, Any]) -> list[str]:
    """Where a level stopped early (--stop-on-saturation) and what it skipped; none otherwise."""
    lines = []
    for lv in report.get("levels") or []:
        stop = lv.get("stopped_early")
        if stop:
            reason = SATURATION_REASONS.get(stop.get("reason"), str(stop.get("reason")))
            detail = f" ({stop['detail']})" if stop.get("detail") else ""
            lines.append(f"concurrency {lv.get('concurrency')} stopped early after "
                         f"{stop.get('after_requests')} requests: {reason}{detail}")
    skipped = report.get("skipped_levels") or []
    if skipped:
        names = [f"concurrency {s['concurrency']}" if s.get("concurrency") is not None
                 else f"rate {s.get('rate_per_s'):g}/s" if s.get("rate_per_s") is not None
                 else "the trace replay" for s in skipped]
        lines.append(f"skipped: {', '.join(names)} ({skipped[0].get('reason')})")
    return lines


def replica_lines(report: Mapping[str, Any]) -> list[str]:
    """One short line per URL of a scan over replicas, for its top level; none otherwise."""
    levels = [lv for lv in report.get("levels") or [] if lv.get("by_url")]
    if not levels:
        return []
    top = levels[-1]
    balance = (report.get("plan") or {}).get("balance", "round-robin")
    lines = [f"by URL at concurrency {top.get('concurrency')} ({balance}):"]
    for figures in top["by_url"]:
        ttft = figures.get("ttft_ms") or {}
        p50 = ttft.get("p50")
        ttft_text = f"TTFT p50 {p50:g} ms" if p50 is not None else "no TTFT"
        lines.append(f"  {figures['url']}: {figures['requests']} requests, "
                     f"{figures['failed']} failed, {ttft_text}")
    return lines
