"""The `tokvera` command. Each subcommand lives in its own module with
`add_arguments(parser)` and `run(args) -> int`; this file only dispatches.

Exit codes: 0 done, 1 internal error (one line; traceback with --debug) or a failed
publish, 2 bad usage, 3 `scan --preflight-only` whose probe failed, 4 below --fail-under.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from scans.grader.cli import UsageError
from scans.grader.scoring import SCORING_VERSION

SUBCOMMANDS = {
    "scan": ("scans.grader.cli.scan", "Load-test and grade an OpenAI-compatible endpoint"),
    "regrade": ("scans.grader.cli.regrade", "Recompute the grade of a report.json from its values"),
    "scoring-table": ("scans.grader.cli.scoring_table", "Print the scoring tables as Markdown"),
    "target": ("scans.grader.cli.target", "Run the reference streaming server (for demos and tests)"),
    "host-agent": ("benchmarks.agent", "Run a host agent that serves network jobs"),
}

EXIT_OK, EXIT_INTERNAL, EXIT_USAGE, EXIT_BELOW_FLOOR = 0, 1, 2, 4
__all__ = ["EXIT_BELOW_FLOOR", "EXIT_INTERNAL", "EXIT_OK", "EXIT_USAGE", "UsageError", "main"]


DESCRIPTION = ("Tokvera: load-test and grade OpenAI-compatible inference endpoints "
               "(scan, regrade, scoring-table), run the reference target, or a network host "
               "agent.")
EPILOG = ("Exit status: 0 done, 1 internal error (or publishing failed), 2 bad usage, "
          "3 preflight failed (scan --preflight-only), 4 grade below --fail-under. "
          "`tokvera COMMAND --help` describes each command.")


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        tool = version("tokvera-site")
    except PackageNotFoundError:  # pragma: no cover - not installed
        tool = "unknown"
    return f"tokvera {tool} (scoring {SCORING_VERSION})"


def build_parser() -> tuple[argparse.ArgumentParser, dict]:
    parser = argparse.ArgumentParser(prog="tokvera", description=DESCRIPTION, epilog=EPILOG)
    parser.add_argument("--version", action="version", version=_version())
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    modules = {}
    for name, (module_path, help_text) in SUBCOMMANDS.items():
        module = importlib.import_module(module_path)
        sub_parser = sub.add_parser(name, help=help_text, description=help_text)
        sub_parser.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                                help="show tracebacks on errors")
        module.add_arguments(sub_parser)
        modules[name] = module
    return parser, modules


def main(argv: list[str] | None = None) -> int:
    parser, modules = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(modules[args.command].run(args) or 0)
    except UsageError as exc:
        sys.stderr.write(f"tokvera {args.command}: {exc}\n")
        return EXIT_USAGE
    except KeyboardInterrupt:
        sys.stderr.write("tokvera: interrupted\n")
        return 130
    except Exception as exc:  # the one place internal errors become an exit status
        if getattr(args, "debug", False):
            raise
        sys.stderr.write(f"tokvera {args.command}: internal error: {type(exc).__name__}: {exc}\n")
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
