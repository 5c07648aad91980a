"""`tokvera scan … --publish SITE_URL --token-env VAR --endpoint ID`: upload a finished report
to the site, for endpoints the site cannot (and must not) reach itself. The site answers 202 at
once and its proof workers recompute every check from the report's samples; this waits for
that verdict (polling the scan) and returns the stored scan, or raises PublishError with the
site's reasons for refusing it."""

from __future__ import annotations

import argparse
import json
import os
import time
import uuid
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx

from scans.grader.cli import UsageError


class PublishError(Exception):
    """The site refused or could not take the report; one line for the user."""


# A scan's statuses once the site's verdict is in (scans.models.ScanStatus).
FINISHED = {"succeeded", "refused", "errored"}


@dataclass(frozen=True)
class PublishTarget:
    url: str
    token: str  # from the environment only; never printed
    site: str = ""  # the site's base URL: the scan is polled there (never at another host)


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
    site_url = args.publish.rstrip("/")
    url = f"{site_url}/api/v1/endpoints/{endpoint}/reports"
    return PublishTarget(url=url, token=token, site=site_url)


def publish(target: PublishTarget, report: dict, timeout: float = 60.0,
            wait_s: float = 900.0, poll_s: float = 0.5) -> dict:
    """POST the report, then wait (up to `wait_s`) for the site's proof; returns the site's
    scan summary once accepted (its grade is the site's own). Raises PublishError when the
    site refused the report (with its reasons), could not take it, or gave no verdict in time."""
    headers = {"Authorization": f"Bearer {target.token}"}
    try:
        response = httpx.post(
            target.url,
            content=json.dumps(report).encode(),
            headers={**headers, "Content-Type": "application/json"},
            timeout=timeout,
        )
    except httpx.HTTPError as exc:
        raise PublishError(f"could not reach {target.url}: {exc}") from None
    if response.status_code not in (200, 202):  # 200: the site already had this report
        raise PublishError(f"the site answered {response.status_code}: {_detail(response)}")
    scan = response.json()
    # The scan is polled on the site we were given, not at whatever Location says: the token
    # goes to that site only.
    poll_url = f"{target.site or _site_of(target.url)}/api/v1/scans/{scan['id']}"
    deadline = time.monotonic() + wait_s
    delay = poll_s
    while scan.get("status") not in FINISHED:
        if time.monotonic() > deadline:
            raise PublishError(f"the site took the report (scan {scan['id']}) but gave no "
                               f"verdict within {wait_s:.0f} s; see {poll_url}")
        time.sleep(delay)
        delay = min(delay * 1.5, 5.0)
        try:
            polled = httpx.get(poll_url, headers=headers, timeout=timeout)
        except httpx.HTTPError:
            continue  # the site is busy or restarting: ask again
        if polled.status_code != 200:
            raise PublishError(f"the site answered {polled.status_code} for scan {scan['id']}: "
                               f"{_detail(polled)}")
        scan = polled.json()
    if scan["status"] == "refused":
        reasons = "; ".join((scan.get("error_reason") or "no reason given").splitlines())
        raise PublishError(f"the site refused the report (scan {scan['id']}): {reasons}")
    if scan["status"] == "errored":
        raise PublishError(f"the site could not prove the report (scan {scan['id']}): "
                           f"{scan.get('error_reason') or 'no reason given'}")
    return scan


def _detail(response: httpx.Response):
    try:
        return response.json()
    except ValueError:
        return response.text[:300]


def _site_of(reports_url: str) -> str:
    return reports_url.split("/api/v1/", 1)[0]
