"""`tokvera scan BASE_URL --model MODEL`: load-test and grade an OpenAI-compatible endpoint."""

from __future__ import annotations

import argparse
import os
import sys
from decimal import Decimal, InvalidOperation
from pathlib import Path

from scans import scoring
from scans.cli import publish as publishing
from scans.engine import PlanError, PromptsFileError, ScanPlan, load_prompts_file, run_scan
from scans.engine.plan import DEFAULT_MAX_TOKENS, DEFAULT_TIMEOUT_S, api_key_from_env
from scans.report import cli_notes, report_from_measurement, write_report
from tokvera_site.cli import UsageError

EXIT_BELOW_FLOOR = 4
DEFAULT_KEY_ENV = "OPENAI_API_KEY"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("base_url", metavar="BASE_URL",
                        help="the API base, e.g. http://127.0.0.1:8080/v1")
    parser.add_argument("--model", required=True, help="model name sent with every request")
    parser.add_argument("--api-key-env", metavar="VAR", default=None,
                        help=f"environment variable holding the API key (default "
                             f"{DEFAULT_KEY_ENV} when set); the key is never taken from the "
                             "command line and never written anywhere")
    parser.add_argument("--concurrency", metavar="LEVELS", default="1,4,16",
                        help="concurrency levels, ascending, starting at 1 (default 1,4,16)")
    parser.add_argument("--requests", metavar="N", type=int, default=None,
                        help="requests per level (default: max(20, 4 x level))")
    parser.add_argument("--max-tokens", metavar="N", type=int, default=DEFAULT_MAX_TOKENS,
                        help=f"max_tokens per request (default {DEFAULT_MAX_TOKENS}); a "
                             "reasoning model's thinking counts against it, often hundreds of "
                             "tokens, so give those a larger budget (the report suggests one)")
    parser.add_argument("--timeout", metavar="SECONDS", type=float, default=DEFAULT_TIMEOUT_S,
                        help=f"per-request timeout (default {DEFAULT_TIMEOUT_S:g})")
    parser.add_argument("--prompts", metavar="FILE", type=Path, default=None,
                        help="your real prompt sample (JSONL or plain text), read locally "
                             "and never sent, for repeat_prompt_share")
    parser.add_argument("--dcgm-url", metavar="URL", default=None,
                        help="a DCGM exporter's metrics URL (DCGM_FI_DEV_GPU_UTIL)")
    parser.add_argument("--price-input", metavar="USD", default=None,
                        help="input price, USD per million tokens")
    parser.add_argument("--price-output", metavar="USD", default=None,
                        help="output price, USD per million tokens")
    parser.add_argument("--out", metavar="DIR", type=Path, default=Path("./tokvera-report"),
                        help="where report.json and report.html go (default ./tokvera-report)")
    parser.add_argument("--fail-under", metavar="GRADE", choices=scoring.GRADES, default=None,
                        help="exit 4 when the grade is worse than GRADE, or there is no grade")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
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


class _Progress:
    """One rich progress bar per level, on stderr."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self._progress = Progress(TextColumn("concurrency {task.fields[level]:>4}"), BarColumn(),
                                  MofNCompleteColumn(), TimeElapsedColumn(),
                                  console=Console(stderr=True), transient=False)
        self._tasks: dict[int, int] = {}

    def __enter__(self) -> _Progress:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()

    def __call__(self, level: int, completed: int, total: int, record: object = None) -> None:
        task = self._tasks.get(level)
        if task is None:
            task = self._tasks[level] = self._progress.add_task("", total=total, level=level)
        self._progress.update(task, completed=completed)


def build_plan(args: argparse.Namespace) -> ScanPlan:
    plan = ScanPlan(
        base_url=args.base_url,
        model=args.model,
        levels=_levels(args.concurrency),
        requests=args.requests,
        max_tokens=args.max_tokens,
        timeout_s=args.timeout,
        api_key=_api_key(args.api_key_env),
        dcgm_url=args.dcgm_url,
        price_input_per_mtok=_price("--price-input", args.price_input),
        price_output_per_mtok=_price("--price-output", args.price_output),
    )
    try:
        return plan.validate()
    except PlanError as exc:
        raise UsageError(str(exc)) from None


def run(args: argparse.Namespace) -> int:
    plan = build_plan(args)
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

    if args.quiet or not sys.stderr:
        measurement = run_scan(plan)
    else:
        with _Progress() as progress:
            measurement = run_scan(plan, progress=progress)

    report = report_from_measurement(plan, measurement, sample)
    try:
        json_path, html_path = write_report(report, out)
    except OSError as exc:
        raise UsageError(f"--out {out}: cannot write the report: "
                         f"{exc.strerror or exc}") from None

    score = report["score"]
    if score["grade"] in scoring.GRADES:
        summary = (f"grade {score['grade']} ({score['points']} points"
                   f"{', provisional scoring ' + score['scoring_version'] if score['provisional'] else ''})")
    else:
        summary = f"no grade: {score['reason']}"
    failed = sum(sum(level["failed"].values()) for level in report["levels"])
    total = sum(level["requests"] for level in report["levels"])
    sys.stdout.write(f"tokvera scan: {summary}; {failed} of {total} requests failed; "
                     f"report: {os.fspath(html_path)}\n")
    for line in cli_notes(report):  # which TTFT was graded; thinking and the budget hint
        sys.stdout.write(f"tokvera scan: {line}\n")
    if not args.quiet:
        for level in report["levels"]:
            for cls, message in level.get("failure_examples", {}).items():
                sys.stderr.write(f"  concurrency {level['concurrency']}: "
                                 f"{level['failed'][cls]} x {cls} (e.g. {message})\n")
    if publish_to is not None:
        try:
            stored = publishing.publish(publish_to, report)
        except publishing.PublishError as exc:
            sys.stderr.write(f"tokvera scan: report written but not published: {exc}\n")
            return 1
        sys.stdout.write(f"tokvera scan: published as scan {stored['id']} "
                         f"(grade {stored['grade']} as graded by the site)\n")
    if args.fail_under and scoring.is_below_floor(score["grade"], args.fail_under):
        sys.stderr.write(f"tokvera scan: grade {score['grade']} is below --fail-under "
                         f"{args.fail_under}\n")
        return EXIT_BELOW_FLOOR
    return 0
