"""`tokvera scoring-table`: print the scoring tables, or check a document's copy of them."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from scans.grader import scoring
from scans.grader.cli import UsageError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--check", metavar="FILE", type=Path,
        help="instead of printing, exit 1 when FILE's generated block (between "
             f"'{scoring.BEGIN_MARKER}' and '{scoring.END_MARKER}') differs from the tables")


def run(args: argparse.Namespace) -> int:
    if args.check is None:
        sys.stdout.write(scoring.markdown())
        return 0
    try:
        text = args.check.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {args.check}: {exc}") from exc
    problem = scoring.docs_block_problem(text)
    if problem is not None:
        sys.stderr.write(f"tokvera scoring-table: {args.check}: {problem}\n")
        return 1
    return 0
