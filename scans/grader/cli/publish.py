"""`tokvera scan … --publish SITE_URL --token-env VAR --endpoint ID`: upload a finished report
to the site, for endpoints the site cannot (and must not) reach itself. The site validates
it, re-grades it from its check values and stores it as a pushed scan."""

from __future__ import annotations

import argparse
import json
import os
import uuid
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx

from scans.grader.cli import UsageError


class PublishError(Exception):
    """The site refused or could not take the report; one line for the user."""


@dataclass(frozen=True)
class PublishTarget:
    url: str
    token: str  # from the environment only; never printed


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("publishing to a Tokvera site")
    group.add_argument("--publish", metavar="SITE_URL", default=None,
                       help="upload the report to this Tokvera site, e.g. https://tokvera.example")
    group.add_argument("--token-env", metavar="VAR", default=None,
                       help="environment variable holding a read-write team API token (tkv_…)")
    group.add_argument("--endpoint", metavar="ID", default=None,
                       help="the site's endpoint id (a UUID) the report belongs to")


def target_from_args(args: argparse.Namespace) -> PublishTarget | None:
    """Check the publishing flags before any load is sent; None when not publishing."""
    given = [args.publish, args.token_env, args.endpoint]
    if not any(given):
        return None
    if not all(given):
        raise UsageError("--publish, --token-env and --endpoint go together")
    site = urlsplit(args.publish)
    if site.scheme not in ("http", "https") or not site.hostname:
        raise UsageError(f"--publish {args.publish!r}: expected http(s)://host")
    try:
        endpoint = uuid.UUID(args.endpoint)
    except ValueError:
        raise UsageError(f"--endpoint {args.endpoint!r}: expected the endpoint's id (a UUID)") from None
    token = os.environ.get(args.token_env, "")
    if not token:
        raise UsageError(f"--token-env {args.token_env}: the environment variable is not set")
    url = f"{args.publish.rstrip('/')}/api/v1/endpoints/{endpoint}/reports"
    return PublishTarget(url=url, token=token)


def publish(target: PublishTarget, report: dict, timeout: float = 60.0) -> dict:
    """POST the report; returns the site's scan summary (its grade is the site's own)."""
    try:
        response = httpx.post(
            target.url,
            content=json.dumps(report).encode(),
            headers={"Authorization": f"Bearer {target.token}",
                     "Content-Type": "application/json"},
            timeout=timeout,
        )
    except httpx.HTTPError as exc:
        raise PublishError(f"could not reach {target.url}: {exc}") from None
    if response.status_code not in (200, 201):  # 200: the site already had this report
        try:
            detail = response.json()
        except ValueError:
            detail = response.text[:300]
        raise PublishError(f"the site answered {response.status_code}: {detail}")
    return response.json()
