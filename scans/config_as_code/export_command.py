"""`tokvera export --site URL [--team SLUG] [--token-env VAR] [-o FILE]`: a team's
configuration on a site as the YAML file `tokvera apply` reads; applied unedited, it changes
nothing.

Secrets are never exported: each secret the site holds is written as `{secret_env: NAME}`,
and the file's header lists the variables to set before applying it."""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from scans.config_as_code import document
from scans.config_as_code.client import (
    EXIT_USAGE,
    SiteError,
    UsageError,
    add_site_arguments,
    detail_of,
    json_of,
    site_from_args,
)

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_site_arguments(parser)
    parser.add_argument("--team", metavar="SLUG", default=None,
                        help="the team (default: the token's own)")
    parser.add_argument("-o", "--output", metavar="FILE", default=None,
                        help="write the YAML here (default: standard output)")


def run(args: argparse.Namespace) -> int:
    try:
        return _export(args)
    except UsageError as exc:
        sys.stderr.write(f"tokvera export: {exc}\n")
        return EXIT_USAGE


def _export(args: argparse.Namespace) -> int:
    site = site_from_args(args)
    try:
        team = args.team or site.token_team()
        answer = site.call("GET", site.config_url(team))
        if answer.status_code == 404:
            raise SiteError(f"no team {team!r} on {site.url} for this token")
        if answer.status_code != 200:
            raise SiteError(f"the site answered {answer.status_code}: {detail_of(answer)}")
        body = json_of(answer)
    except SiteError as exc:
        sys.stderr.write(f"tokvera export: {exc}\n")
        return 1
    text = document.dump(body["config"], _header(site.url, body["config"]))
    for warning in body.get("warnings", []):
        sys.stderr.write(f"tokvera export: note: {warning}\n")
    if args.output:
        try:
            Path(args.output).write_text(text, encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"cannot write {args.output}: {exc}") from None
        sys.stderr.write(f"tokvera export: wrote {args.output}\n")
    else:
        sys.stdout.write(text)
    return 0


def _header(site: str, config: dict[str, Any]) -> str:
    """Where the file came from, and the variables its secrets are read from."""
    lines = [f"# Team {config.get('team')} on {site}, exported "
             f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC by tokvera export.",
             "# Apply with: tokvera apply FILE --site URL (docs/config-as-code.md)."]
    names = sorted(_secret_envs(config))
    if names:
        lines.append("# Secrets are never exported; set these variables before applying:")
        lines += [f"#   {name}" for name in names]
    return "\n".join(lines) + "\n"


def _secret_envs(config: dict[str, Any]) -> set[str]:
    found = set()
    for section in document.KEYED_SECTIONS:
        for item in (config.get(section) or {}).values():
            for value in (item or {}).values():
                if document.is_secret_ref(value):
                    found.add(value[document.SECRET_ENV])
    return found
