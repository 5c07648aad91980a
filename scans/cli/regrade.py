"""`tokvera regrade REPORT.json [--out DIR]`: recompute statuses and score from a report's
stored values under the current scoring code. Never re-measures."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from scans import scoring
from scans.report import regrade, write_report
from tokvera_site.cli import UsageError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("report", metavar="REPORT.json", type=Path, help="a scan's report.json")
    parser.add_argument("--out", metavar="DIR", type=Path, default=None,
                        help="write the re-graded report.json and report.html there "
                             "(default: print the re-graded report.json to stdout)")


def run(args: argparse.Namespace) -> int:
    try:
        report = json.loads(args.report.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {args.report}: {exc}") from None
    except ValueError as exc:
        raise UsageError(f"{args.report} is not JSON: {exc}") from None
    if not isinstance(report, dict) or not isinstance(report.get("checks"), list):
        raise UsageError(f"{args.report} is not a tokvera report (no checks list)")
    try:
        new = regrade(report)
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"{args.report}: cannot re-grade its checks: {exc}") from None
    if args.out is None:
        sys.stdout.write(json.dumps(new, indent=2, ensure_ascii=False) + "\n")
        return 0
    try:
        _, html_path = write_report(new, args.out)
    except OSError as exc:
        raise UsageError(f"--out {args.out}: cannot write: {exc.strerror or exc}") from None
    score = new["score"]
    letter = score["grade"] if score["grade"] in scoring.GRADES else "no grade"
    sys.stdout.write(f"tokvera regrade: {letter} under scoring {score['scoring_version']}; "
                     f"report: {html_path}\n")
    return 0
