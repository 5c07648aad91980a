"""`tokvera apply FILE.yaml --site URL [--token-env VAR] [--dry-run] [--prune]`: make a team's
configuration on a site what the file says, and print the plan.

The file is read and its shape checked here first (a YAML error names its line; every
`secret_env` variable must be set), then sent whole to the site, which checks every item with
the API's own rules and applies all of it in one transaction, or nothing (exit 1 with every
refusal, each naming its item and field). --dry-run asks for the plan only. Items the file
does not name are left alone unless --prune; a section the file leaves out is never touched."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from scans.config_as_code import document
from scans.config_as_code.client import (
    EXIT_USAGE,
    Site,
    SiteError,
    UsageError,
    add_site_arguments,
    detail_of,
    json_of,
    site_from_args,
)
from scans.config_as_code.plan import render_plan, render_problems

__all__ = ["add_arguments", "run"]

EXIT_REFUSED = 1  # the site refused the file, or could not be reached


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE.yaml", help="the team's configuration file")
    add_site_arguments(parser)
    parser.add_argument("--dry-run", action="store_true",
                        help="print the plan (create / change / delete) and change nothing")
    parser.add_argument("--prune", action="store_true",
                        help="delete what the file's sections do not name (without it, such "
                             "items are listed and left as they are)")


def run(args: argparse.Namespace) -> int:
    try:
        site = site_from_args(args)
        config = _read(args.file)
        return _apply(site, config, args)
    except UsageError as exc:
        sys.stderr.write(f"tokvera apply: {exc}\n")
        return EXIT_USAGE
    except SiteError as exc:
        sys.stderr.write(f"tokvera apply: {exc}\n")
        return EXIT_REFUSED


def _apply(site: Site, config: dict, args: argparse.Namespace) -> int:
    answer = site.call("POST", site.config_url(config["team"]),
                       {"config": config, "dry_run": args.dry_run, "prune": args.prune})
    if answer.status_code == 200:
        sys.stdout.write(render_plan(json_of(answer)))
        return 0
    if answer.status_code == 422 and isinstance(json_of(answer).get("errors"), list):
        sys.stderr.write(render_problems(json_of(answer)["errors"],
                                         "tokvera apply: the site refused the file; "
                                         "nothing was changed:"))
        return EXIT_REFUSED
    if answer.status_code == 404:
        raise SiteError(f"no team {config['team']!r} on {site.url} for this token (a token is "
                        "for one team)")
    raise SiteError(f"the site answered {answer.status_code}: {detail_of(answer)}")


def _read(path: str) -> dict:
    """The file, its shape checked and its secrets read from the environment."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {path}: {exc}") from None
    try:
        config = document.load(text, path)
    except document.DocumentError as exc:
        raise UsageError(str(exc)) from None
    problems = document.shape_problems(config)
    resolved, unset = document.resolve_secrets(config, os.environ)
    if problems or unset:
        raise UsageError(render_problems([*problems, *unset], f"{path} has problems; nothing "
                                         "was sent:").rstrip("\n"))
    return resolved
