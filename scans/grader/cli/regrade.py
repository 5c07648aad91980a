"""`tokvera regrade REPORT.json [--out DIR] [--json FILE]`: recompute statuses and score from a
report's stored values under the current scoring code. Never re-measures. Prints one summary
line; writes the re-graded report only where asked (--out: report.json and report.html;
--json: one JSON file, or - for stdout)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from scans.grader import scoring
from scans.grader.cli import UsageError
from scans.grader.report import comparability, regrade, workload_lines, write_report


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("report", metavar="REPORT.json", type=Path, help="a scan's report.json")
    parser.add_argument("--out", metavar="DIR", type=Path, default=None,
                        help="write the re-graded report.json and report.html into DIR")
    parser.add_argument("--json", metavar="FILE", default=None,
                        help="write the re-graded report.json to FILE ('-' for stdout, "
                             "then without the summary line)")
    parser.add_argument("--against", metavar="OTHER.json", type=Path, default=None,
                        help="another report: say whether the two are comparable (the same "
                             "scoring version and the same workload)")


def _summary(old: dict, new: dict) -> str:
    before, after = old.get("score") or {}, new["score"]

    def letter(score: dict) -> str:
        return str(score["grade"]) if score.get("grade") in scoring.GRADES else "no grade"

    return (f"{letter(after)} ({after.get('points')} points) under scoring "
            f"{after['scoring_version']}; was {letter(before)} under scoring "
            f"{before.get('scoring_version', 'unknown')}")


def _read(path: Path) -> dict:
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {path}: {exc}") from None
    except ValueError as exc:
        raise UsageError(f"{path} is not JSON: {exc}") from None
    if not isinstance(report, dict) or not isinstance(report.get("checks"), list):
        raise UsageError(f"{path} is not a tokvera report (no checks list)")
    return report


def run(args: argparse.Namespace) -> int:
    report = _read(args.report)
    # --against: comparable only with the same scoring version and the same workload
    other = _read(args.against) if getattr(args, "against", None) is not None else None
    try:
        new = regrade(report)
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"{args.report}: cannot re-grade its checks: {exc}") from None
    text = json.dumps(new, indent=2, ensure_ascii=False) + "\n"
    if args.json == "-":
        sys.stdout.write(text)
        return 0
    written = []
    try:
        if args.json is not None:
            Path(args.json).write_text(text, encoding="utf-8")
            written.append(args.json)
        if args.out is not None:
            _, html_path = write_report(new, args.out)
            written.append(str(html_path))
    except OSError as exc:
        raise UsageError(f"cannot write the re-graded report: {exc.strerror or exc}") from None
    where = f"; written: {', '.join(written)}" if written else ""
    sys.stdout.write(f"tokvera regrade: {_summary(report, new)}{where}\n")
    if other is not None:
        sys.stdout.write(f"tokvera regrade: workload: {workload_lines(new)[0]}; other: "
                         f"{workload_lines(other)[0]}\n")
        reasons = comparability(new, regrade(other))
        if reasons:
            for reason in reasons:
                sys.stdout.write(f"tokvera regrade: not comparable with {args.against}: "
                                 f"{reason}\n")
        else:
            sys.stdout.write(f"tokvera regrade: comparable with {args.against}: same "
                             "scoring version and workload\n")
    return 0
