"""Pushed reports: `tokvera scan --publish` → ``POST /api/v1/endpoints/{id}/reports``.

One function, ``receive_report``, in the order that keeps a hostile upload cheap:

1. size: a body over ``REPORT_MAX_BYTES`` is refused before it is read or parsed;
2. digest: the SHA-256 of the body as uploaded; a replay returns the stored scan at once;
3. rate: at most ``REPORT_PUSH_LIMIT`` new reports per endpoint per ``REPORT_PUSH_WINDOW_S``;
4. parse (JSON, nesting bounded), schema, model;
5. proof: every check recomputed from the report's own samples (scans/grader/proof.py); a claim its
   samples do not give, or an impossible sample, refuses the report;
6. store the recomputed report as a pushed scan.

Each limit can be overridden by a Django setting of the same name.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import jsonschema
from django.conf import settings
from django.db import IntegrityError, transaction

from benchmarks import ratelimit
from scans import scanning
from scans.grader import proof
from scans.models import Endpoint, Scan, ScanTrigger
from tokvera_site import parsers

__all__ = [
    "PushRateLimited",
    "ReportRefused",
    "ReportTooLarge",
    "limit",
    "receive_report",
    "refuse_oversized",
    "report_schema",
]

# Package data (a link to docs/report.schema.json in a checkout, the file itself in a wheel).
SCHEMA_PATH = Path(proof.__file__).resolve().parent / "report.schema.json"

DEFAULTS = {
    # A default scan's report is about 100 KB; 2,000 requests of 128 tokens at each of four
    # levels is about 6 MB. Parsing and proving 8 MB takes a few seconds of CPU: the ceiling.
    "REPORT_MAX_BYTES": 8 * 1024 * 1024,
    # New (not replayed) reports per endpoint: one every 5 minutes on average, with bursts.
    "REPORT_PUSH_LIMIT": 12,
    "REPORT_PUSH_WINDOW_S": 3600,
}


def limit(name: str) -> int:
    return getattr(settings, name, DEFAULTS[name])


@cache
def report_schema() -> dict:
    return json.loads(SCHEMA_PATH.read_text())


class ReportTooLarge(Exception):
    def __init__(self, size: int):
        super().__init__(f"the report is {size} bytes; at most {limit('REPORT_MAX_BYTES')} "
                         "bytes are accepted")


class PushRateLimited(Exception):
    def __init__(self, retry_after_s: int):
        self.retry_after_s = retry_after_s
        super().__init__(f"at most {limit('REPORT_PUSH_LIMIT')} reports per "
                         f"{limit('REPORT_PUSH_WINDOW_S')} s for one endpoint; try again in "
                         f"{retry_after_s} s")


class ReportRefused(Exception):
    """The report is not stored; `messages` say why (each names the field)."""

    def __init__(self, messages: list[str]):
        self.messages = messages
        super().__init__("; ".join(messages))


@dataclass(frozen=True)
class Received:
    scan: Scan
    created: bool  # False: this exact report was already stored (a replay)


def _parse(body: bytes) -> dict:
    try:
        report = parsers.loads(body)  # the API parser's rules: depth, NaN, storable text
    except parsers.UnacceptableJSON as exc:
        raise ReportRefused([str(exc)]) from None
    if not isinstance(report, dict):
        raise ReportRefused(["expected a report.json object"])
    return report


def _validate(report: dict, endpoint: Endpoint) -> None:
    errors = sorted(jsonschema.Draft202012Validator(report_schema()).iter_errors(report),
                    key=lambda e: list(e.absolute_path))
    if errors:
        raise ReportRefused([f"{'/'.join(map(str, e.absolute_path)) or '(top)'}: {e.message}"
                             for e in errors[:20]])
    if report["target"]["model"] != endpoint.model:
        raise ReportRefused([f"target.model {report['target']['model']!r} is not this "
                             f"endpoint's model {endpoint.model!r}"])


def refuse_oversized(declared_length: str | int | None) -> None:
    """Raise ReportTooLarge when a request's Content-Length is over the limit, so an oversized
    upload is refused before its body is read."""
    try:
        size = int(declared_length or 0)
    except ValueError:
        return  # the body's own length is checked once read
    if size > limit("REPORT_MAX_BYTES"):
        raise ReportTooLarge(size)


def receive_report(endpoint: Endpoint, body: bytes) -> Received:
    """Check, prove and store one uploaded report (see the module docstring for the order).
    Raises ReportTooLarge, PushRateLimited or ReportRefused; nothing is stored then."""
    if len(body) > limit("REPORT_MAX_BYTES"):
        raise ReportTooLarge(len(body))
    digest = hashlib.sha256(body).hexdigest()
    already = endpoint.scans.filter(report_digest=digest).first()
    if already is not None:  # a retried upload: the same answer, nothing stored twice
        return Received(already, created=False)
    allowed, retry_after = ratelimit.allow("report-push", str(endpoint.public_id),
                                           limit("REPORT_PUSH_LIMIT"),
                                           limit("REPORT_PUSH_WINDOW_S"))
    if not allowed:
        raise PushRateLimited(retry_after)
    report = _parse(body)
    _validate(report, endpoint)
    try:
        proven = proof.prove(report)
    except (proof.ImpossibleReport, proof.ReportDisagrees) as exc:
        raise ReportRefused([str(exc)]) from None
    try:
        with transaction.atomic():
            scan = Scan.objects.for_team(endpoint.team_id).create(
                endpoint=endpoint, trigger=ScanTrigger.PUSH, report_digest=digest)
            scan = scanning.store_report(scan, proven, pushed=True)
    except IntegrityError:  # the same upload, racing this one, won
        return Received(endpoint.scans.get(report_digest=digest), created=False)
    return Received(scan, created=True)
