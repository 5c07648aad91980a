"""`tokvera calibrate PILOT.json…`: the calibration table from stored pilot scans.

Each pilot is re-graded from its stored values under every published scoring version (never
re-measured); the command prints, per check, each version's bounds (at the pilot's prompt
length where they follow it), each pilot's value and status, then each pilot's grade and
points under each version. `--markdown` prints the block docs/calibration.md embeds;
`--check FILE` exits 1 when FILE's block differs.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from pathlib import Path

from scans.grader import calibration
from scans.grader.cli import UsageError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("pilots", metavar="PILOT.json", type=Path, nargs="+",
                        help="pilot files (calibration/pilots/*.json)")
    parser.add_argument("--markdown", action="store_true",
                        help="print the Markdown block docs/calibration.md embeds")
    parser.add_argument("--check", metavar="FILE", type=Path, default=None,
                        help="exit 1 when FILE's generated block differs from the table")


def _text(pilots: list[calibration.Pilot]) -> str:
    versions, check_rows, grade_rows = calibration.table_rows(pilots)
    width = max(len(p.id) for p in pilots)
    lines = ["Pilots:"]
    for p in pilots:
        about = (f"{p.conditions['flags']}; {p.conditions['model']}; {p.conditions['engine']}; "
                 f"{p.conditions['hardware']}; {p.conditions['date']}")
        lines += textwrap.wrap(about, 80, initial_indent=f"  {p.id:<{width}}  ",
                               subsequent_indent=" " * (width + 4), break_long_words=False,
                               break_on_hyphens=False)
    header = f"  {'pilot':<{width}} {'value':>10}"
    for version in versions:
        header += f"  {version + ' bounds':>15} {'status':<7}"
    check = None
    for row in check_rows:
        if row[0] != check:
            check = row[0]
            lines += ["", check, header.rstrip()]
        line = f"  {row[1]:<{width}} {row[2]:>10}"
        for i in range(len(versions)):
            bounds, status = row[3 + 2 * i], row[4 + 2 * i]
            status = {"insufficient_evidence": "n/a"}.get(status, status)
            line += f"  {bounds:>15} {status:<7}"
        lines.append(line.rstrip())
    lines += ["", "Grades (points; cap):"]
    for row in grade_rows:
        lines.append(f"  {row[0]:<{width}}  {row[1]:>6} input tokens")
        for version, grade in zip(versions, row[2:], strict=True):
            lines += textwrap.wrap(f"{version}: {grade}", 80,
                                   initial_indent=" " * (width + 4),
                                   subsequent_indent=" " * (width + 11))
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    try:
        pilots = [calibration.load_pilot(path) for path in args.pilots]
    except calibration.PilotError as exc:
        raise UsageError(str(exc)) from None
    ids = [p.id for p in pilots]
    if len(set(ids)) != len(ids):
        raise UsageError("two pilots share an id: " + ", ".join(sorted(
            {i for i in ids if ids.count(i) > 1})))
    block = calibration.markdown(pilots)
    if args.check is not None:
        try:
            text = args.check.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"cannot read {args.check}: {exc}") from None
        problem = calibration.block_problem(text, block)
        if problem is not None:
            sys.stderr.write(f"tokvera calibrate: {args.check}: {problem}\n")
            return 1
        return 0
    sys.stdout.write(block if args.markdown else _text(pilots))
    return 0
