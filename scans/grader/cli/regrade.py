"""`tokvera regrade REPORT.json [--scoring-version V] [--out DIR] [--json FILE]`: recompute
statuses and score from a report's stored values under a scoring version (default: the
current one; every published version stays reproducible). Never re-measures. Prints one summary
line; writes the re-graded report only where asked (--out: report.json and report.html;
--json: one JSON file, or - for stdout)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from scans.grader import scoring
from scans.grader.cli import UsageError, summary
from scans.grader.report import regrade, write_report
from scans.grader.report_text import comparability, workload_lines

EXIT_NOT_COMPARABLE = 6
PREFIX = "tokvera regrade: "


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = (f"exit status: 0 done (and, with --against, comparable); 2 bad usage; "
                     f"{EXIT_NOT_COMPARABLE} --against a report that is not comparable")
    parser.add_argument("report", metavar="REPORT.json", type=Path, help="a scan's report.json")
    parser.add_argument("--scoring-version", metavar="V", default=None,
                        choices=scoring.SCORING_VERSIONS,
                        help=f"grade under this scoring version (default {scoring.SCORING_VERSION}; "
                             f"one of {', '.join(scoring.SCORING_VERSIONS)})")
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

    points = after.get("points")
    shown = f" ({points} points)" if points is not None else ""
    return (f"{letter(after)}{shown} under scoring "
            f"{after['scoring_version']}; was {letter(before)} under scoring "
            f"{before.get('scoring_version') or 'unknown'}")


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
        new = regrade(report, args.scoring_version)
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
    texts = [f"{_summary(report, new)}{where}"]
    reasons: list[str] = []
    if other is not None:
        texts.append(f"workload: {workload_lines(new)[0]}; other: {workload_lines(other)[0]}")
        reasons = comparability(new, regrade(other, args.scoring_version))
        texts.extend(f"not comparable with {args.against}: {reason}" for reason in reasons)
        if not reasons:
            texts.append(f"comparable with {args.against}: same scoring version and workload")
    width = summary.terminal_width()
    for text in texts:
        for line in summary.wrap(text, width, prefix=PREFIX):
            sys.stdout.write(line + "\n")
    return EXIT_NOT_COMPARABLE if reasons else 0
