"""The calls `tokvera apply` and `tokvera export` make to a site's REST API with a team token.

The site is the user's own (any http(s) URL, as `tokvera scan --publish` takes it); the token
comes from an environment variable, goes to that site only, and is never printed. Redirects
are not followed: a token is not carried to wherever a Location points."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

import httpx

__all__ = ["DEFAULT_TOKEN_ENV", "EXIT_USAGE", "Site", "SiteError", "UsageError", "add_site_arguments",
           "site_from_args"]

DEFAULT_TOKEN_ENV = "TOKVERA_TOKEN"  # noqa: S105 - a variable's name, not a token
TIMEOUT_S = 120.0  # a large file is validated and applied in one request


EXIT_USAGE = 2  # as tokvera_site.cli says bad usage


class UsageError(Exception):
    """Bad input from the user (a flag, the file): one line or a few, exit status 2. The
    commands answer it themselves: the grader's UsageError is the grader's own surface."""


class SiteError(Exception):
    """The site could not be reached, or answered what this client cannot use; one line."""


@dataclass(frozen=True)
class Site:
    url: str  # the base URL, no trailing slash
    token: str  # never printed

    def config_url(self, team: str) -> str:
        return f"{self.url}/api/v1/teams/{quote(team, safe='')}/config/"

    def call(self, method: str, url: str, body: dict[str, Any] | None = None) -> httpx.Response:
        try:
            return httpx.request(method, url, json=body, timeout=TIMEOUT_S,
                                 headers={"Authorization": f"Bearer {self.token}",
                                          "Accept": "application/json"})
        except httpx.HTTPError as exc:
            raise SiteError(f"could not reach {self.url}: {exc}") from None

    def token_team(self) -> str:
        """The one team the token is for (GET /api/v1/me/)."""
        answer = self.call("GET", f"{self.url}/api/v1/me/")
        if answer.status_code != 200:
            raise SiteError(f"{self.url} answered {answer.status_code}: {detail_of(answer)}")
        teams = [team.get("slug") for team in json_of(answer).get("teams", [])]
        if len(teams) != 1:
            raise UsageError("the credentials reach several teams or none: say which with --team")
        return str(teams[0])


def add_site_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--site", metavar="URL", required=True,
                        help="the Tokvera site, e.g. https://tokvera.example")
    parser.add_argument("--token-env", metavar="VAR", default=DEFAULT_TOKEN_ENV,
                        help=f"environment variable holding a team API token (tkv_…); "
                             f"default {DEFAULT_TOKEN_ENV}")


def site_from_args(args: argparse.Namespace) -> Site:
    parts = urlsplit(args.site)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"--site {args.site!r}: expected http(s)://host")
    token = os.environ.get(args.token_env, "")
    if not token:
        raise UsageError(f"--token-env {args.token_env}: the environment variable is not set")
    return Site(url=args.site.rstrip("/"), token=token)


def json_of(answer: httpx.Response) -> dict[str, Any]:
    try:
        body = answer.json()
    except ValueError:
        raise SiteError(f"the site answered {answer.status_code} with no JSON: "
                        f"{answer.text[:200]!r}") from None
    if not isinstance(body, dict):
        raise SiteError(f"the site answered {answer.status_code} with unexpected JSON")
    return body


def detail_of(answer: httpx.Response) -> str:
    try:
        body = answer.json()
    except ValueError:
        return answer.text[:200]
    if isinstance(body, dict) and isinstance(body.get("detail"), str):
        return body["detail"]
    return str(body)[:300]
