"""An endpoint's scan profile: the grader's plan for it (workload included), the check of the
site's limits on what it may ask of our workers (each field's maximum is its row in
profile_fields.py, a scan's as a whole are in limits.py), how long it can run at worst (which
sets its deadline), and how a stored report's profile reads ("1/4/16 × 20, 4,000 → 256
tokens") and compares."""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from accounts import encryption
from scans.endpoints import profile_fields
from scans.endpoints.limits import (
    BUILTIN_PROMPT_TOKENS,
    DATASET_BYTES_PER_TOKEN,
    SITE_MAX_DATASET_BYTES,
    SITE_MAX_DATASET_PROMPTS,
    SITE_MAX_LEVEL,
    SITE_MAX_LEVELS,
    SITE_MAX_REQUESTS_PER_SCAN,
    SITE_MAX_SCAN_DURATION,
    SITE_MAX_TOKENS_PER_SCAN,
)
from scans.grader import (
    AGENT_PRESET,
    DEFAULT_LEVELS,
    MAX_SEARCH_REQUESTS,
    Dataset,
    DatasetError,
    PlanError,
    ScanPlan,
    Slo,
    Workload,
    apply_workload_preset,
    default_requests,
    load_dataset,
    next_search_level,
    search_requests,
    search_worst_waves,
)
from scans.models import Endpoint


def worst_case_duration(endpoint: Endpoint) -> timedelta:
    """An upper bound on how long the scan may run: every request of every level timing out
    one after another, at that level's concurrency."""
    seconds = 60.0  # probes (metrics, GPU) and bookkeeping
    if endpoint.output_tokens is not None or endpoint.input_tokens is not None or (
            endpoint.shared_prefix_tokens is not None):
        seconds += 20 * endpoint.timeout_s  # the output-length probes and prompt sizing
    # an agent workload's conversations pause between turns (the grader's preset)
    think_s = AGENT_PRESET.think_time_ms / 1000 if endpoint.agent_workload else 0.0
    for level in endpoint.levels or [1]:
        count = (endpoint.requests_per_level or default_requests(level)) + (endpoint.warmup or 0)
        waves = -(-count // level)
        seconds += waves * (endpoint.timeout_s + think_s)
    if endpoint.capacity_search:
        seconds += search_worst_waves(endpoint.capacity_search_levels,
                                      endpoint.warmup or 0) * endpoint.timeout_s
    return timedelta(seconds=seconds)


# The capacity search never goes above SITE_MAX_LEVEL, and its requests (warm-up
# included) count against SITE_MAX_REQUESTS_PER_SCAN and SITE_MAX_TOKENS_PER_SCAN with the
# plan's: it gets what the plan leaves (search_request_budget).
#
# An error-rate target of 0 ("no failed request") as the scan's SLO: the grader takes only
# positive targets, and a level of at most 20,000 requests with one failure has an error rate
# of at least 0.00005, so this bound refuses every failure as 0 would.
ZERO_ERROR_RATE = 1e-6


def validate_profile(endpoint: Endpoint) -> None:
    """Raise PlanError (one line) when the endpoint's scan profile cannot run here: the
    grader's own rules, then the site's limits (scans/endpoints/service.py calls this for every
    write)."""
    _validate_capacity_targets(endpoint)
    plan = plan_for(endpoint)
    try:
        plan.validate()
    except PlanError as exc:  # the grader names the command line's options; say the site's
        message = profile_fields.in_site_words(str(exc))
        raise PlanError(message.replace("--slo: ", "the SLO: ")) from None
    levels = endpoint.levels or [1]
    if len(levels) > SITE_MAX_LEVELS:
        raise PlanError(f"at most {SITE_MAX_LEVELS} concurrency levels")
    if max(levels) > SITE_MAX_LEVEL:
        raise PlanError(f"a concurrency level can be at most {SITE_MAX_LEVEL} here")
    total = sum(endpoint.requests_per_level or default_requests(level) for level in levels)
    if total > SITE_MAX_REQUESTS_PER_SCAN:
        raise PlanError(f"{total} requests per scan; at most {SITE_MAX_REQUESTS_PER_SCAN} here")
    for field in _SITE_MAXIMA:
        if field.too_high(getattr(endpoint, field.name)):
            raise PlanError(field.refusal())
    _validate_workload(plan)
    _validate_capacity_room(plan)
    worst = worst_case_duration(endpoint)
    if worst > SITE_MAX_SCAN_DURATION:
        hours = worst.total_seconds() / 3600
        raise PlanError(f"if every request timed out this scan would run {hours:.1f} h; "
                        f"lower the timeout or the requests (at most 2 h)")


# The fields whose maximum the site checks itself (the table's `too_big`), in table order.
_SITE_MAXIMA = tuple(field for field in profile_fields.FIELDS if field.too_big)
_ALERT_BELOW = profile_fields.BY_NAME["capacity_alert_below"]


def _validate_capacity_targets(endpoint: Endpoint) -> None:
    """The capacity search and its alert: an SLO to search against, a threshold
    the search can judge."""
    threshold = endpoint.capacity_alert_below
    if threshold is not None:
        if not endpoint.capacity_search:
            raise PlanError("a capacity alert needs the capacity search on")
        if _ALERT_BELOW.out_of_bounds(threshold):
            raise PlanError(_ALERT_BELOW.refusal())
    if not endpoint.capacity_search:
        return
    if endpoint.slo_ttft_p95_ms is None and endpoint.slo_error_rate is None:
        raise PlanError("the capacity search needs an SLO target to search against: set the "
                        "TTFT p95 or the error rate target")
    if endpoint.slo_ttft_p95_ms is not None and endpoint.slo_ttft_p95_ms <= 0:
        raise PlanError("the capacity search needs a TTFT target above 0 ms")


def _validate_capacity_room(plan: ScanPlan) -> None:
    """Room left in the per-scan limits for at least the first level the search would add."""
    if not plan.find_capacity:
        return
    top = max(plan.levels)
    # The level the search adds first when the top level met (at the ceiling: the least it tries).
    first = next_search_level({top: True}, SITE_MAX_LEVEL) or 2
    need = search_requests(first) + plan.workload.warmup
    left = search_request_budget(dataclasses.replace(plan, find_capacity=False))
    if left < need:
        raise PlanError(
            f"the capacity search needs room for at least {need:,} more requests (its first "
            f"level, {first} streams); this profile leaves {max(left, 0):,} within the site's "
            f"{SITE_MAX_REQUESTS_PER_SCAN:,} requests and {SITE_MAX_TOKENS_PER_SCAN:,} tokens "
            "per scan (fewer requests per level, or shorter prompts and replies)")


def scan_slo(endpoint: Endpoint) -> Slo | None:
    """The endpoint's SLO targets as the scan's objective (scans.grader.Slo), None without one. Its
    TTFT target judges every request of every level; attainment is the grader's 95 %."""
    objectives: list[tuple[str, float]] = []
    if endpoint.slo_ttft_p95_ms is not None:
        objectives.append(("ttft_p95_ms", float(endpoint.slo_ttft_p95_ms)))
    if endpoint.slo_error_rate is not None:
        objectives.append(("error_rate", float(endpoint.slo_error_rate) or ZERO_ERROR_RATE))
    return Slo(tuple(objectives)) if objectives else None


def search_request_budget(plan: ScanPlan) -> int:
    """Requests (warm-up included) the capacity search may send after `plan`'s levels
    (planned without the search): what the per-scan request and token limits leave."""
    measured = sum(plan.requests_per_level)
    per_request = _request_tokens(plan)
    tokens_left = SITE_MAX_TOKENS_PER_SCAN - tokens_per_scan(plan)
    return min(SITE_MAX_REQUESTS_PER_SCAN - measured, tokens_left // per_request)


def _validate_workload(plan: ScanPlan) -> None:
    work = plan.workload
    prompt = _prompt_tokens(work)
    most = profile_fields.maximum_of("input_tokens")
    if work.dataset is not None and prompt > most:
        raise PlanError(f"a dataset prompt counts as about {prompt:,} tokens; at most "
                        f"{most:,} here")
    total = tokens_per_scan(plan)
    if total > SITE_MAX_TOKENS_PER_SCAN:
        raise PlanError(f"this scan would send and ask for about {total:,} tokens; at most "
                        f"{SITE_MAX_TOKENS_PER_SCAN:,} per scan here (fewer requests or "
                        "shorter prompts and replies)")


def _prompt_tokens(work: Workload) -> int:
    """Tokens one request's prompt counts for against the limits (its largest, for a dataset)."""
    if work.input_tokens is not None:
        return work.input_tokens
    if work.dataset is not None:
        largest = max(len(json.dumps(item, ensure_ascii=False).encode())
                      for item in work.dataset.items)
        return math.ceil(largest / DATASET_BYTES_PER_TOKEN)
    return max(BUILTIN_PROMPT_TOKENS, work.shared_prefix_tokens or 0)


def tokens_per_scan(plan: ScanPlan) -> int:
    """An upper bound on the tokens a scan sends and asks for: every request (warm-up included)
    × (its prompt + max_tokens)."""
    requests = sum(n + plan.workload.warmup for n in plan.requests_per_level)
    if plan.find_capacity:  # the search's own bound, warm-up included
        requests += (plan.search_max_requests if plan.search_max_requests is not None
                     else MAX_SEARCH_REQUESTS * (1 + plan.workload.warmup))
    return requests * _request_tokens(plan)


def _request_tokens(plan: ScanPlan) -> int:
    """An upper bound on one request's prompt and reply: in a conversation, the last turn's,
    whose prompt resends every earlier turn's prompt and reply."""
    work = plan.workload
    turns = max(1, work.turns)
    return (_prompt_tokens(work) + plan.max_tokens) * turns


def parse_load_dataset(text: str) -> Dataset:
    """A load dataset's JSONL text, parsed by the grader's own reader (`tokvera scan
    --dataset`) from an anonymous in-memory file: the text never touches a disk. Raises
    DatasetError (one line, naming the line) when it cannot be used."""
    try:
        raw = text.encode()
    except UnicodeEncodeError:  # a lone surrogate (JSON's "\ud800") is no UTF-8 text
        raise DatasetError("the dataset is not UTF-8 text") from None
    if len(raw) > SITE_MAX_DATASET_BYTES:
        raise DatasetError(f"the dataset is larger than "
                           f"{SITE_MAX_DATASET_BYTES // (1024 * 1024)} MB")
    fd = os.memfd_create("tokvera-load-dataset", os.MFD_CLOEXEC)
    try:
        os.write(fd, raw)
        path = f"/proc/self/fd/{fd}"
        try:
            dataset = load_dataset(path)
        except DatasetError as exc:
            raise DatasetError(str(exc).replace(f"dataset {path}", "the dataset")) from None
    finally:
        os.close(fd)
    if dataset.lines > SITE_MAX_DATASET_PROMPTS:
        raise DatasetError(f"the dataset has {dataset.lines:,} prompts; at most "
                           f"{SITE_MAX_DATASET_PROMPTS:,} here")
    return dataclasses.replace(dataset, path="load-dataset.jsonl")


def workload_for(endpoint: Endpoint) -> Workload:
    """The grader's Workload for the endpoint's fields (the dataset decrypted in memory)."""
    text = encryption.decrypt(endpoint.load_dataset_encrypted)
    try:
        dataset = parse_load_dataset(text) if text else None
    except DatasetError as exc:
        raise PlanError(str(exc)) from None
    options: dict[str, Any] = {}
    for field in profile_fields.group("workload", kind="number"):
        value = getattr(endpoint, field.name)
        options[field.name] = field.blank_is if value is None else value
    workload = Workload(**options, dataset=dataset)
    # the grader's agent preset fills what the fields leave blank, as `--workload agent` does
    return (apply_workload_preset(workload, "agent", api=endpoint.api)
            if endpoint.agent_workload else workload)


def plan_for(endpoint: Endpoint) -> ScanPlan:
    """The grader's plan for an endpoint (the API key and the load dataset decrypted in memory
    only). A fixed reply length is the plan's max_tokens. With the capacity search on, the
    endpoint's SLO targets are the scan's SLO and the search is bounded by the site's limits
    (at most SITE_MAX_LEVEL streams, the requests the plan leaves)."""
    plan = _levels_plan(endpoint)
    if not endpoint.capacity_search:
        return plan
    return dataclasses.replace(
        plan, slo=scan_slo(endpoint), find_capacity=True,
        search_levels=endpoint.capacity_search_levels, search_max_level=SITE_MAX_LEVEL,
        search_max_requests=max(1, search_request_budget(plan)))


def _levels_plan(endpoint: Endpoint) -> ScanPlan:
    workload = workload_for(endpoint)
    return ScanPlan(
        base_url=endpoint.base_url,
        model=endpoint.model,
        levels=tuple(endpoint.levels or DEFAULT_LEVELS),
        requests=endpoint.requests_per_level,
        # a fixed reply length (the field's, or the agent preset's) is the ceiling too
        max_tokens=workload.output_tokens or endpoint.max_tokens,
        timeout_s=endpoint.timeout_s,
        api_key=encryption.decrypt(endpoint.api_key_encrypted) or None,
        use_nvidia_smi=False,  # the site's workers never sample their own GPUs
        price_input_per_mtok=endpoint.price_input_per_mtok,
        price_output_per_mtok=endpoint.price_output_per_mtok,
        workload=workload,
        api=endpoint.api,
    )


# -- a stored report's profile ------------------------------------------------------------------

#: Where report.json keeps what must match for two grades to be compared: the levels
#: and requests, and the workload asked. A report without plan.workload (from before the nonce)
#: has none of the workload's keys (warmup is null).
PLAN_PATHS = {
    "levels": ("levels",),
    "requests": ("requests_per_level",),
    "max_tokens": ("max_tokens",),
    **{name: ("workload", name) for name in profile_fields.names("workload", kind="number")},
    "dataset_name": ("workload", "dataset", "name"),
    "dataset_lines": ("workload", "dataset", "lines"),
    "dataset_sha256": ("workload", "dataset", "sha256"),
    # the API spoken and the agent-shaped load (its turns, tools, schema and mix), a change of
    # either a change of load
    "api": ("api",),
    "agent": ("workload", "agent"),
}


@dataclass(frozen=True)
class LoadProfile:
    """The load a scan ran, as people read it (`label`) and as charts compare it (`key`)."""

    key: str
    label: str

    def __str__(self) -> str:
        return self.label


def plan_annotations(report_field: str = "report") -> dict[str, Any]:
    """SQL expressions (text) reading PLAN_PATHS out of a scan's report, named `pf_<name>`."""
    from django.db.models.fields.json import KeyTextTransform, KeyTransform

    def text(keys: tuple[str, ...]) -> Any:  # KT() cannot start across a relation
        expression: Any = report_field
        for key in keys[:-1]:
            expression = KeyTransform(key, expression)
        return KeyTextTransform(keys[-1], expression)

    return {f"pf_{name}": text(("plan", *path)) for name, path in PLAN_PATHS.items()}


def plan_columns(prefix: str = "") -> dict[str, Any]:
    """The same `pf_<name>` values as plan_annotations(), read from the scan's load_plan
    column (written as the report was stored) instead of its report; `prefix` reaches the scan
    across a relation ("scan__")."""
    from django.db.models.fields.json import KeyTextTransform

    return {f"pf_{name}": KeyTextTransform(f"pf_{name}", f"{prefix}load_plan")
            for name in PLAN_PATHS}


def _text_value(text: Any) -> Any:
    if not isinstance(text, str):
        return text
    try:
        return json.loads(text)
    except ValueError:
        return text


def profile_of_row(row: Mapping[str, Any]) -> LoadProfile:
    """The profile of a row annotated with plan_annotations()."""
    return _profile({name: (row.get(f"pf_{name}") if name.startswith("dataset_n")
                            or name == "dataset_sha256" else _text_value(row.get(f"pf_{name}")))
                     for name in PLAN_PATHS})


def profile_of(plan: Mapping[str, Any] | None) -> LoadProfile:
    """The profile of a report's `plan` (report.json)."""
    values: dict[str, Any] = {}
    for name, path in PLAN_PATHS.items():
        value: Any = plan if isinstance(plan, Mapping) else None
        for step in path:
            value = value.get(step) if isinstance(value, Mapping) else None
        values[name] = value
    return _profile(values)


#: How a label names each API besides chat completions.
API_NAMES = {"completions": "completions", "responses": "Responses",
             "messages": "Anthropic Messages", "embeddings": "embeddings"}


def agent_label(agent: Mapping[str, Any]) -> str:
    """report.json's plan.workload.agent in a few words: "agent sessions: 4 turns, tools,
    JSON"."""
    mix = agent.get("mix")
    shape = [f"{_n(agent.get('turns'))} turns" if agent.get("turns") != 1 else "single turns"]
    if agent.get("tools"):
        shape.append("tools")
    if agent.get("structured_output"):
        shape.append("JSON")
    return ("agent sessions: " if mix else "agent-shaped: ") + ", ".join(shape)


def _n(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else "?"


def _profile(v: Mapping[str, Any]) -> LoadProfile:
    levels = v["levels"] if isinstance(v["levels"], list) else []
    counts = v["requests"] if isinstance(v["requests"], list) else [v["requests"]]
    per = (_n(counts[0]) if len(set(map(str, counts))) == 1
           else "/".join(_n(c) for c in counts))
    parts = [f"{'/'.join(_n(lv) for lv in levels) or '?'} × {per}"]
    if v["input_tokens"]:
        sent = _n(v["input_tokens"])
    elif v["dataset_sha256"]:
        sent = f"{v['dataset_name'] or 'dataset'} ({_n(v['dataset_lines'])} prompts)"
    else:
        sent = "built-in prompts"
    if v["shared_prefix_tokens"]:
        sent += f" ({_n(v['shared_prefix_tokens'])} shared)"
    out = _n(v["output_tokens"]) if v["output_tokens"] else f"≤{_n(v['max_tokens'])}"
    parts.append(f"{sent} → {out} tokens")
    if v["warmup"]:
        parts.append(f"warm-up {_n(v['warmup'])}")
    if v["warmup"] is None:
        parts.append("no nonce")
    agent = v["agent"] if isinstance(v["agent"], Mapping) else None
    if agent is not None:
        parts.append(agent_label(agent))
    api = v["api"] or "chat"  # a report from before other APIs spoke chat
    if api != "chat":
        parts.append(f"{API_NAMES.get(api, api)} API")
    values = {**v, "api": api, "agent": agent}
    key = json.dumps([values[name] for name in PLAN_PATHS if name != "dataset_name"],
                     separators=(",", ":"), sort_keys=True, default=str)
    return LoadProfile(key=key, label=", ".join(parts))
