"""`tokvera scoring-table [--scoring-version V]`: print the scoring tables (bounds, where each
comes from, weights, bands, caps), or check a document's copy of them."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from scans.grader import scoring
from scans.grader.cli import UsageError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--scoring-version", metavar="V", default=None,
                        choices=scoring.SCORING_VERSIONS,
                        help=f"the tables of this version (default {scoring.SCORING_VERSION}; "
                             f"one of {', '.join(scoring.SCORING_VERSIONS)})")
    parser.add_argument(
        "--check", metavar="FILE", type=Path,
        help="instead of printing, exit 1 when FILE's generated block (between "
             f"'{scoring.BEGIN_MARKER}' and '{scoring.END_MARKER}') differs from the tables")


def run(args: argparse.Namespace) -> int:
    if args.check is None:
        sys.stdout.write(scoring.markdown(args.scoring_version))
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
