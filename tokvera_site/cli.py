"""The `tokvera` command. Each subcommand lives in its own module with
`add_arguments(parser)` and `run(args) -> int`; this file only dispatches.

Exit codes: 0 done, 1 internal error (one line; traceback with --debug) or a failed
publish, 2 bad usage, 3 `scan --preflight-only` whose probe failed, 4 below --fail-under.

Start-up: this module imports the standard library only, and a subcommand's module
is imported once argparse has chosen that subcommand (`_LazySubcommands`), so `tokvera scan`
loads the grader, `tokvera host-agent` the agent, and neither loads Django or Celery;
`tokvera --help` lists every subcommand from SUBCOMMANDS without importing any, and
`tokvera --version` reads the scoring version from scans/grader/version.py without importing
the grader. The dispatcher stays in tokvera_site (the console script `tokvera_site.cli:main`,
and `python -m tokvera_site.cli`) because importing the package is itself Django-free: its
__init__ no longer loads the Celery app, which Django processes load in SiteConfig.ready()
and `celery -A tokvera_site` finds as tokvera_site.celery. An import contract in
pyproject.toml and tests/scans/grader/test_cli_startup.py (which sees importlib's imports too)
keep it so.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from types import ModuleType

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up time)
if TYPE_CHECKING:
    from scans.grader.cli import UsageError  # at run time: __getattr__, and main() imports it

SUBCOMMANDS = {
    "scan": ("scans.grader.cli.scan", "Load-test and grade an OpenAI-compatible endpoint"),
    "regrade": ("scans.grader.cli.regrade", "Recompute the grade of a report.json from its values"),
    "scoring-table": ("scans.grader.cli.scoring_table", "Print the scoring tables as Markdown"),
    "calibrate": ("scans.grader.cli.calibrate",
                  "Print the calibration table from stored pilot scans"),
    "target": ("scans.grader.cli.target", "Run the reference streaming server (for demos and tests)"),
    "host-agent": ("benchmarks.agent", "Run a host agent that serves network jobs"),
    "apply": ("scans.config_as_code.apply_command",
              "Apply a team's configuration file (YAML) to a Tokvera site"),
    "export": ("scans.config_as_code.export_command",
               "Write a team's configuration on a Tokvera site as YAML"),
}

EXIT_OK, EXIT_INTERNAL, EXIT_USAGE, EXIT_BELOW_FLOOR = 0, 1, 2, 4
__all__ = ["EXIT_BELOW_FLOOR", "EXIT_INTERNAL", "EXIT_OK", "EXIT_USAGE", "UsageError", "main"]


DESCRIPTION = ("Tokvera: load-test and grade OpenAI-compatible inference endpoints "
               "(scan, regrade, scoring-table, calibrate), run the reference target or a network host "
               "agent, and apply or export a team's configuration as code.")
EPILOG = ("Exit status: 0 done, 1 internal error (or publishing failed, or the site refused a "
          "configuration), 2 bad usage, "
          "3 preflight failed (scan --preflight-only), 4 grade below --fail-under. "
          "`tokvera COMMAND --help` describes each command.")


def __getattr__(name: str) -> type[Exception]:
    """`from tokvera_site.cli import UsageError` still works, importing the grader only then."""
    if name == "UsageError":
        from scans.grader.cli import UsageError

        return UsageError
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _scoring_version() -> str:
    """SCORING_VERSION without importing scans.grader (its __init__ loads the whole scanner):
    the constant's module, scans/grader/version.py, imports nothing, so it is run on its own
    (or imported the ordinary way where there is no such file, say from a zip)."""
    import importlib.util

    loaded = sys.modules.get("scans.grader.version")
    scans = None if loaded else importlib.util.find_spec("scans")  # found, not imported
    if scans is not None and scans.submodule_search_locations:
        path = os.path.join(list(scans.submodule_search_locations)[0], "grader", "version.py")
        spec = importlib.util.spec_from_file_location("scans.grader.version", path)
        if os.path.isfile(path) and spec is not None and spec.loader is not None:
            loaded = importlib.util.module_from_spec(spec)  # not put in sys.modules
            spec.loader.exec_module(loaded)
    if loaded is None:
        loaded = importlib.import_module("scans.grader.version")
    return str(loaded.SCORING_VERSION)


def _tool_version() -> str:
    """The installed distribution's version, as importlib.metadata.version("tokvera-site") gives
    it: the METADATA of the first tokvera_site-*.dist-info on sys.path. Read here because
    importlib.metadata costs more start-up than the rest of `tokvera --version`; anything else
    (an egg, a zip) is left to importlib.metadata."""
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for name in names:
            if name.lower().startswith("tokvera_site-") and name.endswith(".dist-info"):
                try:
                    with open(os.path.join(entry, name, "METADATA"), encoding="utf-8") as metadata:
                        for line in metadata:
                            if line.startswith("Version:"):
                                return line.partition(":")[2].strip()
                            if not line.strip():
                                break
                except OSError:
                    pass
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tokvera-site")
    except PackageNotFoundError:  # pragma: no cover - not installed
        return "unknown"


def _version() -> str:
    return f"tokvera {_tool_version()} (scoring {_scoring_version()})"


class _LazyVersion(argparse._VersionAction):
    """--version, worked out only when asked for."""

    def __call__(self, parser, namespace, values, option_string=None):
        self.version = _version()
        super().__call__(parser, namespace, values, option_string)


class _LazySubcommands(argparse._SubParsersAction):
    """Subparsers whose arguments come from their module, imported once argparse has picked the
    subcommand (so its own --help and its errors are complete); the others stay unimported."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.modules: dict[str, ModuleType] = {}

    def __call__(self, parser, namespace, values, option_string=None):
        name = values[0]  # argparse has checked it is one of the choices
        if name not in self.modules:
            module = importlib.import_module(SUBCOMMANDS[name][0])
            module.add_arguments(self._name_parser_map[name])
            self.modules[name] = module
        super().__call__(parser, namespace, values, option_string)


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, ModuleType]]:
    """The parser, and the modules of the subcommands it has parsed (filled in by parse_args)."""
    parser = argparse.ArgumentParser(prog="tokvera", description=DESCRIPTION, epilog=EPILOG)
    parser.add_argument("--version", action=_LazyVersion)
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                action=_LazySubcommands)
    assert isinstance(sub, _LazySubcommands)
    for name, (_module_path, help_text) in SUBCOMMANDS.items():
        sub_parser = sub.add_parser(name, help=help_text, description=help_text)
        sub_parser.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                                help="show tracebacks on errors")
    return parser, sub.modules


def main(argv: list[str] | None = None) -> int:
    parser, modules = build_parser()
    args = parser.parse_args(argv)
    from scans.grader.cli import UsageError  # already loaded: the subcommand's module raises it

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
