"""Test a connection before saving: the scan's own preflight (``GET /models`` and one probe)
for a URL, model and API key as typed in the endpoint form, through the outbound guard.

Nothing is stored: the key lives in memory for the call and is masked in every sentence the
result carries (the preflight redacts it). A team may test ``TESTS_PER_WINDOW`` times per
``WINDOW_S`` (the probe costs the target one real request).

Until the server has given an HTTP answer, every failure is told as one class, "not reachable
from this site" (kind ``unreachable``): a refused address, a name that does not resolve, a
closed, filtered or silent port, a reset. Told apart they would map the names and ports the
site can reach (scans/outbound.py); the detail goes to the server log (the key masked). A TLS
failure is "TLS error"; once the server answers, its status and words are told as they are.

With no model given, the server's list is read first and the probe asks for its first model,
so the person sees both what the server offers and whether it answers.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field

from common import ratelimit
from scans import outbound
from scans.endpoints import service as endpoints
from scans.grader import ModelsListing, PlanError, ScanPlan, list_models, redact_text, run_scan

__all__ = [
    "MAX_TIMEOUT_S",
    "TESTS_PER_WINDOW",
    "WINDOW_S",
    "ConnectionReport",
    "TooManyTests",
    "check_connection",
]

log = logging.getLogger(__name__)

#: Per team: each test sends the target one real request (and reads /models).
TESTS_PER_WINDOW = 10
WINDOW_S = 60
#: A test waits at most this long for the probe, whatever the endpoint's own timeout is.
MAX_TIMEOUT_S = 15.0
PROBE_MAX_TOKENS = 16


class TooManyTests(Exception):
    def __init__(self, retry_after_s: int):
        super().__init__(f"too many connection tests for this team; try again in {retry_after_s} s")
        self.retry_after_s = retry_after_s


@dataclass
class ConnectionReport:
    """What a test found, as the form shows it (and the JSON answer carries)."""

    base_url: str
    model: str  # the model the probe asked for ("" when no probe was sent)
    model_chosen: bool = False  # no model was given: the probe asked for the server's first
    reachable: bool = False  # the server answered the probe (any HTTP status)
    ok: bool = False  # the probe got a streamed answer: a scan can run
    cause: str | None = None  # one sentence when not ok
    kind: str | None = None  # unreachable, tls, timeout, auth, http_status, model_not_found…
    ttft_ms: float | None = None
    models_answered: bool = False
    models: list[str] = field(default_factory=list)
    models_total: int = 0
    models_detail: str = ""
    model_listed: bool | None = None  # None: the server gave no usable list

    def as_dict(self) -> dict:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


def check_connection(
    team_id: int, base_url: str, model: str, api_key: str | None, timeout_s: float = MAX_TIMEOUT_S
) -> ConnectionReport:
    """Run the preflight against `base_url`. Raises endpoints.InvalidURL for a URL the form
    refuses anyway and TooManyTests past the team's limit; every network outcome, the guard's
    refusal included, is a report."""
    base_url = endpoints.clean_base_url(base_url)
    allowed, retry_after = ratelimit.allow("connection-test", str(team_id), TESTS_PER_WINDOW, WINDOW_S)
    if not allowed:
        raise TooManyTests(retry_after)
    report, answered = _check(base_url, model, api_key, timeout_s)
    return report if answered or report.ok else _unanswered(report)


def _check(
    base_url: str, model: str, api_key: str | None, timeout_s: float
) -> tuple[ConnectionReport, bool]:
    """The report, and whether the server gave any HTTP answer (to /models or the probe)."""
    model = (model or "").strip()
    timeout_s = min(max(float(timeout_s or MAX_TIMEOUT_S), 1.0), MAX_TIMEOUT_S)
    report = ConnectionReport(base_url=base_url, model=model)
    secrets = [api_key] if api_key else []
    try:
        outbound.check_url(base_url)  # a forbidden address is refused before any connection
        plan = ScanPlan(
            base_url=base_url,
            model=model or "-",
            levels=(1,),
            requests=1,
            max_tokens=PROBE_MAX_TOKENS,
            timeout_s=timeout_s,
            api_key=api_key,
            use_nvidia_smi=False,
        )
        if not model:
            listing = list_models(plan, connect_guard=outbound.guard)
            _keep_listing(report, listing, secrets)
            if listing.ids:
                report.model, report.model_chosen = listing.ids[0], True
                plan = dataclasses.replace(plan, model=report.model)
            elif listing.status_code is not None or listing.detail.startswith("timeout"):
                return _listing_failed(report, listing, secrets), listing.status_code is not None
            # else no connection at all: the probe names the cause as a scan would (TLS,
            # refused, DNS), whatever model it asks for.
        measurement = run_scan(
            plan.validate(), connect_guard=outbound.guard, tune_gc=False, preflight_only=True
        )
    except outbound.OutboundRefused as exc:
        return _refused(report, exc.detail), False
    except PlanError as exc:
        report.cause, report.kind = redact_text(str(exc), secrets), "invalid"
        return report, True  # nothing was sent: nothing to hide
    refused = outbound.refusal_in(measurement)
    if refused:
        return _refused(report, refused), False
    preflight = measurement.preflight
    assert preflight is not None  # run_scan always runs the preflight
    _keep_listing(report, preflight.models, secrets)
    probe = preflight.probe
    report.reachable = preflight.server_answered
    report.ok = probe.failure is None
    report.cause, report.kind = preflight.cause, preflight.kind
    report.ttft_ms = probe.ttft_ms if report.ok else None
    return report, preflight.server_answered or preflight.models.status_code is not None


def _unanswered(report: ConnectionReport) -> ConnectionReport:
    """A test the server never answered in HTTP, told in a coarse class (the module's rule)."""
    log.info("connection test of %s: %s (%s)", report.base_url, report.cause, report.models_detail)
    cause = (report.cause or "").lower()
    if report.kind == "tls" and "eof" not in cause:  # the peer spoke: not TLS, or not trusted
        if "answered plain http" not in cause:  # (that one names only what was typed, and the fix)
            report.cause = f"{outbound.TLS_ERROR}: the handshake failed (an untrusted certificate?)"
    else:
        report.kind, report.cause = "unreachable", outbound.NOT_REACHABLE
    report.reachable = False
    report.models_detail = ""
    return report


def _keep_listing(report: ConnectionReport, listing: ModelsListing, secrets: list[str]) -> None:
    report.models_answered = listing.answered
    report.models = list(listing.ids)
    report.models_total = listing.ids_total
    report.models_detail = redact_text(listing.detail, secrets)
    report.model_listed = listing.model_listed if listing.answered and report.model else None


def _listing_failed(report: ConnectionReport, listing: ModelsListing, secrets: list[str]) -> ConnectionReport:
    """No model given and no list to pick from: say why the list is missing."""
    detail = redact_text(listing.detail, secrets)
    if listing.answered:  # a list without a single model id
        report.reachable = True
        report.cause, report.kind = (f"{listing.url} lists no models: type the model name", "no_models")
    elif listing.status_code is not None:
        report.reachable = True
        if listing.status_code in (401, 403):
            key = "the API key sent was refused" if secrets else "no API key was sent"
            report.cause, report.kind = (
                f"the server refused the request (HTTP {listing.status_code}): {key}",
                "auth",
            )
        else:
            report.cause, report.kind = (
                f"{listing.url} answered {detail}: type the model name",
                "http_status",
            )
    else:
        report.cause, report.kind = f"{listing.url}: {detail}", "timeout"
    return report


def _refused(report: ConnectionReport, detail: str) -> ConnectionReport:
    """The guard refused the address: nothing was sent (`detail`, for the log, names it)."""
    report.reachable, report.ok = False, False
    report.cause = f"not tested: {detail}"
    report.kind = "refused_by_guard"
    report.models, report.models_total, report.models_answered = [], 0, False
    report.model_listed = None
    return report
