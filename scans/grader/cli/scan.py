"""`tokvera scan BASE_URL --model MODEL`: load-test and grade an OpenAI-compatible endpoint.

First a preflight (GET /models and one probe request; see scans.grader.preflight), then the
levels. Prints the grade, the cause of any failure and a table of the headline numbers; writes
report.json, report.html and requests.jsonl (scans.grader.request_log). Exit status: 0 done,
2 bad usage, 3 --preflight-only and the probe failed, 4 below --fail-under (decided after
publishing was attempted), 5 no request succeeded (the endpoint is down; without --fail-under
too), 1 publishing failed (when neither 4 nor 5 applies) or an internal error. With --repeat N
the scan runs N times (scans.grader.repeat) and the verdict and exit status are the median
run's.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import TYPE_CHECKING

from scans.grader import (
    PlanError,
    PromptsFileError,
    ScanPlan,
    load_prompts_file,
    report_text,
    run_scan,
    scoring,
)
from scans.grader import formatting as fmt
from scans.grader.apis import APIS
from scans.grader.capacity import DEFAULT_SEARCH_LEVELS
from scans.grader.cli import UsageError, summary
from scans.grader.cli import publish as publishing
from scans.grader.objective import DEFAULT_ATTAINMENT, Slo, SloError, parse_slo
from scans.grader.openloop import MIN_RATE_REQUESTS, OpenLoop, OpenLoopError, parse_arrival, parse_rates
from scans.grader.plan import DEFAULT_MAX_TOKENS, DEFAULT_TIMEOUT_S, api_key_from_env
from scans.grader.preflight import ReplicaError
from scans.grader.progress import LevelFigures as _Running  # the site's scan page shows the same
from scans.grader.progress import ScanProgress, time_left
from scans.grader.prompts import PromptSample
from scans.grader.repeat import (
    MAX_REPEAT,
    REPEAT_FILE,
    RepeatError,
    essentials,
    grade_label,
    parse_repeat,
    run_dir,
    summarise,
    summary_texts,
)
from scans.grader.replicas import BALANCE_POLICIES
from scans.grader.report import report_from_measurement, write_report
from scans.grader.report_text import is_down
from scans.grader.request_log import REQUESTS_FILE, write_requests
from scans.grader.trace_file import TraceError, TraceReplay, load_trace
from scans.grader.workload import (
    AGENT,
    AGENT_PRESET,
    PRESETS,
    Workload,
    WorkloadError,
    apply_workload_preset,
    load_dataset,
    parse_input_tokens,
)

if TYPE_CHECKING:  # rich is imported only when a progress bar is drawn
    from rich.console import Console
    from rich.progress import TaskID

EXIT_PUBLISH_FAILED = 1
EXIT_PREFLIGHT_FAILED = 3
EXIT_BELOW_FLOOR = 4
EXIT_DOWN = 5
DEFAULT_KEY_ENV = "OPENAI_API_KEY"


EPILOG = (f"exit status: 0 done; {EXIT_PUBLISH_FAILED} publishing failed or an internal error; "
          f"2 bad usage; {EXIT_PREFLIGHT_FAILED} --preflight-only and the probe failed; "
          f"{EXIT_BELOW_FLOOR} below --fail-under; {EXIT_DOWN} no request succeeded (the "
          "endpoint is down), with or without --fail-under; with --repeat, 4 and 5 are the "
          "median run's")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    parser.add_argument("base_url", metavar="BASE_URL",
                        help="the API base, e.g. http://127.0.0.1:8080/v1")
    parser.add_argument("--model", required=True, help="model name sent with every request")
    parser.add_argument("--api-key-env", metavar="VAR", default=None,
                        help=f"environment variable holding the API key (default "
                             f"{DEFAULT_KEY_ENV} when set); the key is never taken from the "
                             "command line and never written anywhere")
    parser.add_argument("--api", choices=APIS, default="chat",
                        help="the API the load speaks (default chat): chat (/chat/completions), "
                             "completions (/completions), responses (/responses), messages "
                             "(Anthropic's /messages), embeddings (/embeddings: latency and "
                             "throughput, no TTFT)")
    parser.add_argument("--concurrency", metavar="LEVELS", default="1,4,16",
                        help="concurrency levels, ascending, starting at 1 (default 1,4,16); "
                             "each level needs at least as many requests as its concurrency")
    parser.add_argument("--requests", metavar="N", type=int, default=None,
                        help="requests per level (default: max(20, 4 x level))")
    parser.add_argument("--max-tokens", metavar="N", type=int, default=None,
                        help=f"max_tokens per request (default {DEFAULT_MAX_TOKENS}, or "
                             "--output-tokens); a ceiling, replies end where the model stops; a "
                             "reasoning model's thinking counts against it, often hundreds of "
                             "tokens, so give those a larger budget (the report suggests one)")
    parser.add_argument("--timeout", metavar="SECONDS", type=float, default=DEFAULT_TIMEOUT_S,
                        help=f"per-request timeout in seconds, the preflight's probe "
                             f"included (default {DEFAULT_TIMEOUT_S:g})")
    parser.add_argument("--prompts", metavar="FILE", type=Path, default=None,
                        help="your real prompt sample (JSONL or plain text), read locally "
                             "and never sent, for repeat_prompt_share (to send prompts as the "
                             "load, use --dataset)")
    parser.add_argument("--dataset", metavar="FILE", type=Path, default=None,
                        help='JSONL prompts SENT as the load, cycled, one {"prompt": ...} or '
                             '{"messages": [...]} per line; each gets the scan\'s nonce')
    parser.add_argument("--input-tokens", metavar="N", default=None,
                        help="prompts of N tokens as the server counts them (chat template "
                             "included), sized with its /tokenize or by probes; N±SD (or "
                             "N+-SD) or MIN-MAX for lengths that differ per request (seeded)")
    parser.add_argument("--workload", metavar="PRESET", choices=sorted(PRESETS), default=None,
                        help="input and output lengths of a common shape: "
                             + "; ".join(f"{name} {i:,} → {o:,}"
                                         for name, (i, o, _) in PRESETS.items() if name != AGENT)
                             + " (after Artificial Analysis); or agent: an agent's sessions, "
                             f"{AGENT_PRESET.text()} (input tokens "
                             f"{AGENT_PRESET.input_tokens:,}: the system prompt and the first "
                             "user message; --shared-prefix-tokens is the system prompt); "
                             "any option given overrides the preset's value")
    parser.add_argument("--output-tokens", metavar="M", type=int, default=None,
                        help="replies of M tokens: max_tokens M plus ignore_eos and "
                             "min_tokens where the server accepts them (probed first; the "
                             "report says whether the length was enforced)")
    parser.add_argument("--shared-prefix-tokens", metavar="P", type=int, default=None,
                        help="the first P prompt tokens are the same for every request of "
                             "the scan (the nonce follows them); the report gives the share "
                             "cached")
    parser.add_argument("--turns", metavar="N", type=int, default=None,
                        help="conversations of N turns: each resends its history (the earlier "
                             "prompts and the replies received); a level's concurrency counts "
                             "conversations in flight (default 1)")
    parser.add_argument("--think-time-ms", metavar="T", type=float, default=None,
                        help="pause between a conversation's turns, ms (default 0)")
    parser.add_argument("--tools", metavar="SET", default=None,
                        help="send tools with every request: 'builtin' (two small tools) or a "
                             "JSON file listing OpenAI tools; report.json gives the share of "
                             "tool calls that parse, name a declared tool and fit its schema")
    parser.add_argument("--tool-choice", metavar="CHOICE", default=None,
                        help="tool_choice sent with --tools: auto (the default) or required")
    parser.add_argument("--json-schema", metavar="SCHEMA", default=None,
                        help="ask for structured output (response_format json_schema): "
                             "'builtin' or a JSON Schema file; report.json gives the share of "
                             "replies that parse and validate")
    parser.add_argument("--warmup", metavar="N", type=int, default=0,
                        help="N requests before each level's measurement, not counted "
                             "(default 0)")
    parser.add_argument("--slo", metavar="OBJECTIVES", default=None,
                        help="a service-level objective, any of ttft_p95_ms=MS, itl_p95_ms=MS, "
                             "e2e_p95_ms=MS, error_rate=SHARE (comma-separated): each level's "
                             "attainment (share of requests meeting every objective, failures "
                             "as misses) and goodput are reported; not graded")
    parser.add_argument("--attainment", metavar="SHARE", type=float, default=None,
                        help=f"share of requests that must meet the --slo for a level to meet "
                             f"it (default {DEFAULT_ATTAINMENT:g})")
    parser.add_argument("--find-capacity", action="store_true",
                        help="after the levels, search for the largest concurrency that meets "
                             "the --slo (double, then bisect; searched levels are not graded)")
    parser.add_argument("--search-levels", metavar="N", type=int, default=DEFAULT_SEARCH_LEVELS,
                        help=f"at most N levels the capacity search adds (default "
                             f"{DEFAULT_SEARCH_LEVELS}); each sends max(20, 2 x concurrency) "
                             "requests")
    parser.add_argument("--rate", metavar="RATES", default=None,
                        help="open-loop levels after the others, in requests per second (e.g. "
                             "2,8,32): each request is sent when it is due, whether or not the "
                             "server is done; latency is also measured from the scheduled time; "
                             "measured, not graded")
    parser.add_argument("--arrival", metavar="KIND", default=None,
                        help="how --rate requests arrive: poisson (default), constant, or "
                             "gamma:B (B < 1 burstier, 1 Poisson, > 1 steadier); seeded")
    parser.add_argument("--arrival-seed", metavar="N", type=int, default=None,
                        help="the seed of the --rate arrival times (default 0: the same "
                             "schedule every scan)")
    parser.add_argument("--rate-requests", metavar="N", type=int, default=None,
                        help=f"requests per --rate level (default: about 10 s of arrivals, at "
                             f"least {MIN_RATE_REQUESTS}, the fewest a p95 needs)")
    parser.add_argument("--max-connections", metavar="N", type=int, default=None,
                        help="at most N --rate (or --trace) requests in flight; later ones "
                             "wait for a connection, and that wait counts in the latency from "
                             "schedule (default: no limit)")
    parser.add_argument("--trace", metavar="FILE", type=Path, default=None,
                        help="replay a JSONL trace after the other levels, each request at its "
                             "own time, open-loop: Mooncake lines ({timestamp ms, input_length, "
                             "output_length, hash_ids}; requests naming the same hash ids share "
                             "those 512-token blocks of prompt) or BurstGPT's ({Timestamp s, "
                             "Request tokens, Response tokens}); lengths in the server's tokens; "
                             "measured, not graded")
    parser.add_argument("--trace-speed", metavar="X", type=float, default=None,
                        help="replay the --trace X times as fast as it was recorded (default 1)")
    parser.add_argument("--trace-limit", metavar="N", type=int, default=None,
                        help="replay only the first N requests of the --trace")
    parser.add_argument("--trace-max-s", metavar="S", type=float, default=None,
                        help="replay only the requests due within S seconds of trace time "
                             "(before --trace-speed)")
    parser.add_argument("--replica", metavar="URL", action="append", default=[],
                        help="another base URL of the same model (a replica); repeat it for "
                             "more. The load is spread over BASE_URL and every --replica; each "
                             "must pass the preflight")
    parser.add_argument("--balance", choices=BALANCE_POLICIES, default="round-robin",
                        help="how requests are spread over the URLs: round-robin (an exact "
                             "split) or least-in-flight (default round-robin)")
    parser.add_argument("--stop-on-saturation", action="store_true",
                        help="stop a concurrency level early when the server falls behind "
                             "(an error burst or a growing queue) and skip the levels after it")
    parser.add_argument("--dcgm-url", metavar="URL", default=None,
                        help="a DCGM exporter's metrics URL (DCGM_FI_DEV_GPU_UTIL)")
    parser.add_argument("--price-input", metavar="USD", default=None,
                        help="input price, USD per million tokens")
    parser.add_argument("--price-output", metavar="USD", default=None,
                        help="output price, USD per million tokens")
    parser.add_argument("--out", metavar="DIR", type=Path, default=Path("./tokvera-report"),
                        help=f"where report.json, report.html and {REQUESTS_FILE} (one line "
                             "per request sent: times, tokens, status) go (default "
                             "./tokvera-report)")
    parser.add_argument("--repeat", metavar="N", default=None,
                        help=f"run the same scan N times back to back (2 to {MAX_REPEAT}; "
                             "default 1): each run's report in DIR/run-1, DIR/run-2, ...; "
                             f"medians, 95 %% confidence intervals and the spread of grades in "
                             f"DIR/{REPEAT_FILE}; the verdict and exit status are the median "
                             "run's")
    parser.add_argument("--fail-under", metavar="GRADE", choices=scoring.GRADES, default=None,
                        help="exit 4 when the grade is worse than GRADE, or there is no grade "
                             "(with --repeat: the median run's grade)")
    parser.add_argument("--preflight-only", action="store_true",
                        help="only the preflight: GET /models and one probe request; print "
                             "what they found and exit (3 when the probe failed); no load, "
                             "no report")
    parser.add_argument("--quiet", action="store_true",
                        help="print only the verdict: the headline and the grade (no "
                             "progress, tables or details)")
    publishing.add_arguments(parser)


def _levels(text: str) -> tuple[int, ...]:
    try:
        levels = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise UsageError(f"--concurrency {text!r}: expected integers like 1,4,16") from None
    return levels


def _price(flag: str, text: str | None) -> Decimal | None:
    if text is None:
        return None
    try:
        value = Decimal(text)
    except InvalidOperation:
        raise UsageError(f"{flag} {text!r}: expected a number (USD per million tokens)") from None
    if not value.is_finite() or value < 0:
        raise UsageError(f"{flag} {text!r}: expected a non-negative number")
    return value


def _api_key(var: str | None) -> str | None:
    if var is None:
        return api_key_from_env(DEFAULT_KEY_ENV)
    if not var or not var.replace("_", "").isalnum():
        raise UsageError(f"--api-key-env {var!r}: expected an environment variable name")
    key = api_key_from_env(var)
    if key is None:
        raise UsageError(f"--api-key-env {var}: the environment variable is not set")
    return key


class ScanBars:
    """One rich progress bar per level, on stderr: requests done, the running TTFT p50 and
    aggregate output rate of the level's successful requests, and the whole scan's time left.

    The time left is the plan's, not the bar's (scans.grader.progress.ScanProgress): the level
    running at its pace so far, then every level still to come (its requests over its
    concurrency, in request times measured so far), every open-loop level at its rate and the
    trace replay (its span over the speed, then one request time).
    A capacity search, whose levels are not known ahead, is named as not counted. Each row is
    laid out to fit an 80-column terminal."""

    def __init__(self, plan: ScanPlan, console: Console | None = None,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        self._scan = ScanProgress(clock=clock)
        self._scan.expect(plan)
        self._clock = clock
        self._progress = Progress(
            TextColumn("{task.fields[label]}"), BarColumn(bar_width=10),
            MofNCompleteColumn(), TextColumn("{task.fields[ttft]}"),
            TextColumn("{task.fields[rate]}"), TextColumn("{task.fields[left]}"),
            console=console or Console(stderr=True), transient=False)
        self._tasks: dict[int | str, TaskID] = {}
        self._running: dict[int | str, _Running] = {}
        self._current: int | str | None = None

    def __enter__(self) -> ScanBars:
        # The bars start with the first level: a scan its preflight stopped leaves no line.
        return self

    def __exit__(self, *exc: object) -> None:
        if self._tasks:
            self._progress.stop()

    def __call__(self, level: int, completed: int, total: int, record: object = None) -> None:
        self._scan(level, completed, total, record)
        self._update(level, f"c={level}", completed, total, record)

    def rate(self, rate: float, completed: int, total: int, record: object = None) -> None:
        """An open-loop rate level's progress (load.RateProgressCallback)."""
        self._scan.rate(rate, completed, total, record)
        self._update(f"rate {rate:g}", f"{rate:g}/s", completed, total, record)

    def trace(self, completed: int, total: int, record: object = None) -> None:
        """The trace replay's progress (runner.TraceProgressCallback): its time left runs on
        the trace's clock (ScanProgress.trace)."""
        self._scan.trace(completed, total, record)
        self._update("trace", "trace", completed, total, record)

    def left_text(self) -> str:
        """"~40 s left" for the whole scan ("+ search" when a capacity search is still to
        come); "" until a request time is known."""
        snapshot = self._scan.snapshot()
        seconds = snapshot.get("scan_eta_s")
        if seconds is None:
            return ""
        more = " + search" if snapshot.get("scan_eta_excludes") else ""
        return f"~{time_left(seconds)} left{more}"

    def _update(self, key: int | str, label: str, completed: int, total: int,
                record: object) -> None:
        task = self._tasks.get(key)
        if task is None:
            if not self._tasks:
                self._progress.start()
            if self._current is not None:  # the level before is over: only its figures stay
                self._progress.update(self._tasks[self._current], left="")
            task = self._tasks[key] = self._progress.add_task(
                "", total=total, label=label, ttft="TTFT —", rate="", left="")
            self._running[key] = _Running(self._clock)
            self._current = key
        running = self._running[key]
        if record is not None:
            running.add(record)
        self._progress.update(task, completed=completed, ttft=f"TTFT {running.ttft_text()}",
                              rate=running.rate_text(),
                              left=self.left_text() if completed < total else "")


def _print_summary(report: dict, html_path: Path, *, quiet: bool,
                   extra: list[str] | None = None) -> None:
    """Warnings, one line per cap and failed check, the notes and the headline table, then
    last the verdict: the headline (for an endpoint that never answered, the cause) and the
    grade, laid out for the terminal's width (scans.grader.cli.summary). `quiet`: the verdict
    only."""
    width = summary.terminal_width()
    say = sys.stdout.write
    if quiet:
        for line in summary.closing_lines(report, width):
            say(line + "\n")
        return
    for level in report["levels"]:
        level_cause = level.get("failure_summary")
        if level_cause and len(report["levels"]) > 1:
            for line in summary.wrap(f"concurrency {level['concurrency']}: "
                                     f"{level_cause['sentence']}", width, prefix="  "):
                sys.stderr.write(line + "\n")
    sys.stderr.flush()
    for line in summary.summary_lines(report, os.fspath(html_path), width):
        say(line + "\n")
    for text in [*report_text.saturation_lines(report), *report_text.replica_lines(report)]:
        for line in summary.wrap(text, width):
            say(line + "\n")
    for line in _table_lines(report, width):
        say(line + "\n")
    for text in report_text.trace_lines(report):
        for line in summary.wrap(text, width):
            say(line + "\n")
    for text in extra or []:
        for line in summary.wrap(text, width):
            say(line + "\n")
    for line in summary.closing_lines(report, width):
        say(line + "\n")


def _table_lines(report: dict, width: int) -> list[str]:
    if (report.get("preflight") or {}).get("stopped"):  # no load ran: no table to show
        return []
    lines = summary.table_lines(report["levels"], width)
    if report.get("search_levels"):
        lines += summary.table_lines(report["search_levels"], width, summary.SEARCH_TITLE)
    if report.get("rate_levels"):
        lines += summary.rate_table_lines(report["rate_levels"], width)
    return lines


def _preflight_lines(preflight: dict, model: str) -> list[str]:
    models = preflight["models"]
    if models["answered"]:
        listed = "is" if models["model_listed"] else "is not"
        shown = ", ".join(models["ids"][:8]) + (", …" if models["ids_total"] > 8 else "")
        first = (f"GET /models: {models['ids_total']} model id(s) ({shown}); "
                 f"'{model}' {listed} among them")
    else:
        first = f"GET /models: not answered ({models['detail']})"
    probe = preflight["probe"]
    if probe["outcome"] == "succeeded":
        second = f"probe request: succeeded (TTFT {fmt.ms(probe['ttft_ms'])})"
    else:
        verdict = "the scan stops here" if preflight["stopped"] else "a scan would go on"
        second = f"probe request: {preflight['cause']} ({verdict})"
    return [first, second]


def _workload(args: argparse.Namespace) -> Workload:
    dataset = None
    if getattr(args, "dataset", None) is not None:
        try:
            dataset = load_dataset(args.dataset)
        except WorkloadError as exc:
            raise UsageError(str(exc)) from None
    preset = getattr(args, "workload", None)
    input_tokens: int | None = None
    spread = None
    if getattr(args, "input_tokens", None) is not None:
        try:
            input_tokens, spread = parse_input_tokens(str(args.input_tokens))
        except WorkloadError as exc:
            raise UsageError(str(exc)) from None
    workload = Workload(input_tokens=input_tokens, input_spread=spread,
                        output_tokens=getattr(args, "output_tokens", None),
                        shared_prefix_tokens=getattr(args, "shared_prefix_tokens", None),
                        warmup=getattr(args, "warmup", 0) or 0, dataset=dataset,
                        **_agent_options(args))
    if preset is None:
        return workload
    if preset == AGENT and getattr(args, "turns", None) == 1:
        raise UsageError("--turns 1 with --workload agent: the preset is conversations; "
                         "give --turns 2 or more, or drop --workload agent")
    # The preset's values wherever an option was not given
    workload = apply_workload_preset(workload, preset, api=getattr(args, "api", "chat"))
    if getattr(args, "think_time_ms", None) == 0:  # given as 0: no pause, not the preset's
        workload = replace(workload, think_time_ms=0.0)
    return workload


def _agent_options(args: argparse.Namespace) -> dict:
    """--turns, --think-time-ms, --tools, --tool-choice and --json-schema, read and checked
    (files included) before anything is sent."""
    choice = getattr(args, "tool_choice", None)
    from scans.grader.agent_load import (  # jsonschema: only when asked
        AgentShapeError,
        load_schema,
        load_tools,
    )

    tools_spec = getattr(args, "tools", None)
    schema_spec = getattr(args, "json_schema", None)
    turns = getattr(args, "turns", None)
    if choice is not None and tools_spec is None:
        if getattr(args, "workload", None) != AGENT:
            raise UsageError("--tool-choice needs --tools (the tools to choose from)")
        tools_spec = "builtin"  # the agent preset's tools, with the choice given
    if turns is not None and turns < 1:
        raise UsageError(f"--turns {turns}: expected at least 1")
    if turns is not None and turns > 1 and getattr(args, "rate", None) is not None:
        raise UsageError("--turns with --rate: conversations run at a concurrency of "
                         "sessions, not at an open-loop rate")
    try:
        tools = load_tools(tools_spec, choice or "auto") if tools_spec is not None else None
        structured = load_schema(schema_spec) if schema_spec is not None else None
    except AgentShapeError as exc:
        raise UsageError(str(exc)) from None
    return {"turns": turns or 1, "think_time_ms": getattr(args, "think_time_ms", None) or 0.0,
            "tools": tools, "structured_output": structured}


def _slo(args: argparse.Namespace) -> Slo | None:
    text = getattr(args, "slo", None)
    attainment = getattr(args, "attainment", None)
    if text is None:
        if attainment is not None:
            raise UsageError("--attainment needs --slo (the objectives to attain)")
        return None
    try:
        return parse_slo(text, DEFAULT_ATTAINMENT if attainment is None else attainment)
    except SloError as exc:
        raise UsageError(str(exc)) from None


def _open_loop(args: argparse.Namespace) -> OpenLoop | None:
    text = getattr(args, "rate", None)
    if text is None:
        given = [flag for flag, name in (("--arrival", "arrival"),
                                         ("--arrival-seed", "arrival_seed"),
                                         ("--rate-requests", "rate_requests"),
                                         ("--max-connections", "max_connections"))
                 if getattr(args, name, None) is not None]
        if given == ["--max-connections"] and getattr(args, "trace", None) is not None:
            return None  # it applies to the trace replay
        if given:
            also = " or --trace" if given[0] == "--max-connections" else ""
            raise UsageError(f"{given[0]} needs --rate{also} (the open-loop requests it "
                             "applies to)")
        return None
    try:
        arrival = parse_arrival(args.arrival or "poisson", args.arrival_seed or 0)
        return OpenLoop(parse_rates(text), arrival, requests=args.rate_requests,
                        max_connections=args.max_connections).validate()
    except OpenLoopError as exc:
        raise UsageError(str(exc)) from None


def _trace(args: argparse.Namespace) -> TraceReplay | None:
    """--trace and its options, the file read and checked before anything is sent."""
    path = getattr(args, "trace", None)
    speed = getattr(args, "trace_speed", None)
    limit = getattr(args, "trace_limit", None)
    max_s = getattr(args, "trace_max_s", None)
    if path is None:
        given = [flag for flag, value in (("--trace-speed", speed), ("--trace-limit", limit),
                                          ("--trace-max-s", max_s)) if value is not None]
        if given:
            raise UsageError(f"{given[0]} needs --trace (the trace it applies to)")
        return None
    try:
        return TraceReplay(load_trace(path, limit=limit, max_s=max_s),
                           speed=1.0 if speed is None else speed,
                           max_connections=getattr(args, "max_connections", None),
                           limit=limit, max_s=max_s).validate()
    except TraceError as exc:
        raise UsageError(str(exc)) from None


def build_plan(args: argparse.Namespace) -> ScanPlan:
    slo = _slo(args)
    open_loop = _open_loop(args)
    trace = _trace(args)
    workload = _workload(args)
    max_tokens = args.max_tokens
    if max_tokens is None:
        max_tokens = workload.output_tokens or DEFAULT_MAX_TOKENS
    plan = ScanPlan(
        base_url=args.base_url,
        model=args.model,
        levels=_levels(args.concurrency),
        requests=args.requests,
        max_tokens=max_tokens,
        timeout_s=args.timeout,
        workload=workload,
        api_key=_api_key(args.api_key_env),
        dcgm_url=args.dcgm_url,
        price_input_per_mtok=_price("--price-input", args.price_input),
        price_output_per_mtok=_price("--price-output", args.price_output),
        slo=slo,
        find_capacity=bool(getattr(args, "find_capacity", False)),
        search_levels=getattr(args, "search_levels", DEFAULT_SEARCH_LEVELS),
        open_loop=open_loop,
        replicas=tuple(getattr(args, "replica", None) or ()),
        balance=getattr(args, "balance", "round-robin"),
        stop_on_saturation=bool(getattr(args, "stop_on_saturation", False)),
        trace=trace,
        api=getattr(args, "api", "chat"),
    )
    try:
        return plan.validate()
    except PlanError as exc:
        raise UsageError(str(exc)) from None


def _repeat(args: argparse.Namespace) -> int:
    text = getattr(args, "repeat", None)
    if text is None:
        return 1
    try:
        runs = parse_repeat(str(text))
    except RepeatError as exc:
        raise UsageError(str(exc)) from None
    if runs > 1 and args.preflight_only:
        raise UsageError("--repeat with --preflight-only: the preflight runs once, no scan "
                         "to repeat")
    if runs > 1 and getattr(args, "publish", None):
        raise UsageError("--repeat with --publish: the site takes one scan's report; publish "
                         "a single run instead")
    return runs


def run(args: argparse.Namespace) -> int:
    runs = _repeat(args)
    plan = build_plan(args)
    if args.preflight_only:
        return _run_preflight_only(plan)
    publish_to = publishing.target_from_args(args)
    sample = None
    if args.prompts is not None:
        try:
            sample = load_prompts_file(args.prompts)
        except PromptsFileError as exc:
            raise UsageError(str(exc)) from None
    out = args.out
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out}: exists and is not a directory")
    if runs > 1:
        return _run_repeated(args, plan, sample, runs)

    report, html_path = _scan_into(plan, sample, out, quiet=args.quiet)
    status = 0
    published: list[str] = []
    if publish_to is not None:
        try:
            stored = publishing.publish(publish_to, report)
        except publishing.PublishError as exc:
            sys.stderr.write(f"tokvera scan: report written but not published: {exc}\n")
            status = EXIT_PUBLISH_FAILED
        else:
            graded = f"grade {stored['grade']}" if stored.get("grade") else "no grade"
            published.append(f"published as scan {stored['id']} ({graded} as graded by the "
                             "site)")
    _print_summary(report, html_path, quiet=args.quiet, extra=published)
    # The floor is decided after publishing was attempted: a CI gate fails for the grade,
    # not for the network.
    return _exit_status(report, args.fail_under, status)


def _exit_status(report: dict, fail_under: str | None, status: int, run: str = "") -> int:
    """Below --fail-under exits 4, a down endpoint 5 (floor or not), else `status`. `run`
    names the run whose verdict it is ("the median run (run 2)")."""
    grade = report["score"]["grade"]
    if fail_under and scoring.is_below_floor(grade, fail_under):
        what = (f"the endpoint is down (report.json: {grade})" if is_down(report)
                else f"grade {grade}")
        sys.stderr.write(f"tokvera scan: {run + ': ' if run else ''}{what} is below "
                         f"--fail-under {fail_under}\n")
        return EXIT_BELOW_FLOOR
    if is_down(report):  # no request succeeded: a failure for any caller, floor or not
        return EXIT_DOWN
    return status


def _scan_into(plan: ScanPlan, sample: PromptSample | None, out: Path, *,
               quiet: bool) -> tuple[dict, Path]:
    """Run one scan and write report.json, report.html and requests.jsonl into `out`."""
    try:
        if quiet or not sys.stderr:
            measurement = run_scan(plan)
        else:
            with ScanBars(plan) as progress:
                measurement = run_scan(plan, progress=progress, rate_progress=progress.rate,
                                       trace_progress=progress.trace)
    except (WorkloadError, ReplicaError) as exc:  # before any load: one line, nothing measured
        raise UsageError(f"stopped before any load: {exc}") from None

    report = report_from_measurement(plan, measurement, sample)
    try:
        _, html_path = write_report(report, out)
        write_requests(measurement, out)
    except OSError as exc:
        raise UsageError(f"--out {out}: cannot write the report: "
                         f"{exc.strerror or exc}") from None
    return report, html_path


def _run_text(report: dict) -> str:
    """One run in a few words: "grade A (100.0 points); 0 of 8 requests failed"."""
    levels = report.get("levels") or []
    failed = sum(sum((level.get("failed") or {}).values()) for level in levels)
    total = sum(int(level.get("requests") or 0) for level in levels)
    label = grade_label(report)
    points = report["score"].get("points")
    grade = (f"grade {label} ({fmt.number(points, 'rate')} points)" if label in scoring.GRADES
             else label)
    return f"{grade}; {failed} of {total} requests failed"


def _run_repeated(args: argparse.Namespace, plan: ScanPlan, sample: PromptSample | None,
                  runs: int) -> int:
    """--repeat: `runs` scans back to back, each into its run-K directory, then repeat.json
    and the summary; the verdict printed last, and the exit status, are the median run's."""
    width = summary.terminal_width()

    def say(text: str) -> None:
        for line in summary.wrap(text, width):
            sys.stdout.write(line + "\n")
        sys.stdout.flush()

    reports = []
    for run in range(1, runs + 1):
        report, _ = _scan_into(plan, sample, args.out / run_dir(run), quiet=args.quiet)
        reports.append(essentials(report))
        del report  # each run's report is on disk; only its summary figures stay in memory
        if not args.quiet:
            say(f"run {run} of {runs}: {_run_text(reports[-1])}")
    result = summarise(reports)
    path = args.out / REPEAT_FILE
    try:
        path.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n",
                        encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"--out {args.out}: cannot write {REPEAT_FILE}: "
                         f"{exc.strerror or exc}") from None
    middle = result["median_run"]["run"]
    if not args.quiet:
        for text in summary_texts(result):
            say(text)
        say(f"reports: {args.out / run_dir(1)} to {args.out / run_dir(runs)}; summary: {path}")
    say(f"grades over {runs} runs: {result['grade_spread']}; median run: run {middle}")
    median_report = json.loads((args.out / run_dir(middle) / "report.json").read_text("utf-8"))
    for line in summary.closing_lines(median_report, width):
        sys.stdout.write(line + "\n")
    return _exit_status(median_report, args.fail_under, 0, run=f"the median run (run {middle})")


def _run_preflight_only(plan: ScanPlan) -> int:
    try:
        measurement = run_scan(plan, preflight_only=True)
    except ReplicaError as exc:
        sys.stdout.write(f"tokvera scan: preflight: {exc}\n")
        return EXIT_PREFLIGHT_FAILED
    assert measurement.preflight is not None  # run_scan always runs the preflight
    preflight = measurement.preflight.as_dict()
    for line in _preflight_lines(preflight, plan.model):
        sys.stdout.write(f"tokvera scan: preflight: {line}\n")
    return 0 if preflight["probe"]["outcome"] == "succeeded" else EXIT_PREFLIGHT_FAILED
