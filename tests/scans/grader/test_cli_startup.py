"""What `tokvera` loads at start-up: never Django or Celery, and of the subcommands
only the one that was asked for. Each case runs the command in a fresh interpreter under
`python -X importtime` and reads what it imported from that report and from sys.modules at exit
(the report leaves out a module imported by importlib.import_module itself, though not what that
module imports; the import contract in pyproject.toml sees neither). No timings are asserted."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from pathlib import Path

import pytest

from scans.grader import scoring
from tests.helpers.processes import ROOT
from tokvera_site import cli

SITE_ONLY = ("django", "celery", "kombu", "billiard", "rest_framework", "drf_spectacular",
             "django_celery_beat", "accounts", "tokvera_site.celery", "tokvera_site.settings")
SUBCOMMAND_MODULES = {name: module for name, (module, _help) in cli.SUBCOMMANDS.items()}


# Prints sys.modules at exit, after SystemExit (--help, --version, argparse's errors) too.
DUMP = ("import atexit, sys; "
        "atexit.register(lambda: print('\\nMODULES', *sorted(sys.modules), file=sys.stderr)); ")
AS_CONSOLE_SCRIPT = "from tokvera_site.cli import main; sys.exit(main())"  # what .venv/bin/tokvera does
AS_MODULE = "import runpy; runpy.run_module('tokvera_site.cli', run_name='__main__', alter_sys=True)"


def _run(code: str, *args: str) -> tuple[subprocess.CompletedProcess, set[str]]:
    """Run `code` as `python -X importtime -c code args`; its result and the modules it imported."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", DUMP + code, *args],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    lines = done.stderr.splitlines()
    modules = {line.rsplit("|", 1)[1].strip() for line in lines
               if line.startswith("import time:") and "|" in line}
    modules.discard("imported package")  # the report's header line
    at_exit = [line.split()[1:] for line in lines if line.startswith("MODULES ")]
    assert at_exit and len(modules) > 10, done.stderr[-2000:]  # both were read
    return done, modules | set(at_exit[-1])


def _tokvera(*args: str) -> tuple[subprocess.CompletedProcess, set[str]]:
    return _run(AS_CONSOLE_SCRIPT, *args)


def _site_modules(modules: set[str]) -> set[str]:
    return {m for m in modules if any(m == s or m.startswith(f"{s}.") for s in SITE_ONLY)}


@pytest.mark.parametrize("code", [AS_CONSOLE_SCRIPT, AS_MODULE], ids=["console-script", "-m"])
def test_version_loads_neither_the_site_nor_the_grader(code):
    done, modules = _run(code, "--version")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == (f"tokvera {importlib.metadata.version('tokvera-site')} "
                           f"(scoring {scoring.SCORING_VERSION})\n")
    assert not _site_modules(modules)
    assert not {m for m in modules if m.startswith(("scans.", "benchmarks", "httpx"))}


def test_the_installed_console_script_loads_no_site_either():
    script = Path(sys.executable).with_name("tokvera")
    if not script.exists():
        pytest.skip(f"no console script beside {sys.executable}")
    done, modules = _run(f"import runpy; runpy.run_path({str(script)!r}, run_name='__main__')",
                         "--version")
    assert done.returncode == 0 and done.stdout.startswith("tokvera "), done.stderr[-2000:]
    assert not _site_modules(modules)
    assert "tokvera_site.cli" in modules


def test_top_level_help_lists_every_subcommand_without_importing_any():
    done, modules = _tokvera("--help")
    assert done.returncode == 0, done.stderr[-2000:]
    for name, (_module, help_text) in cli.SUBCOMMANDS.items():
        assert name in done.stdout and help_text in done.stdout
    assert not _site_modules(modules)
    assert not {m for m in modules if m.startswith(("scans.", "benchmarks"))}


@pytest.mark.parametrize("name", list(cli.SUBCOMMANDS))
def test_a_subcommands_help_imports_that_subcommand_only(name):
    done, modules = _tokvera(name, "--help")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith(f"usage: tokvera {name} ")
    assert not _site_modules(modules), name
    assert {m for m in SUBCOMMAND_MODULES.values() if m in modules} == {SUBCOMMAND_MODULES[name]}


def test_usage_errors_load_no_site():
    done, modules = _tokvera("regrade", str(ROOT / "no-such-report.json"))
    assert done.returncode == cli.EXIT_USAGE
    assert any(line.startswith("tokvera regrade: cannot read") for line in done.stderr.splitlines())
    assert not _site_modules(modules)
    done, modules = _tokvera("no-such-command")
    assert done.returncode == cli.EXIT_USAGE and "invalid choice" in done.stderr
    assert not _site_modules(modules)


def test_importing_the_site_package_itself_loads_nothing_of_django():
    done, modules = _run("import tokvera_site")
    assert done.returncode == 0, done.stderr[-2000:]
    assert not _site_modules(modules)


def test_the_cheap_version_readers_agree_with_the_real_ones():
    assert cli._scoring_version() == scoring.SCORING_VERSION
    assert cli._tool_version() == importlib.metadata.version("tokvera-site")


def test_usage_error_is_still_importable_from_the_dispatcher():
    from scans.grader.cli import UsageError

    assert cli.UsageError is UsageError
    with pytest.raises(AttributeError):
        cli.no_such_name  # noqa: B018
