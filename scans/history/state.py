"""An endpoint's state and its cause: "is it up, and if not, why", from its latest scans.

The rules (DECISIONS.md, "Endpoint state"), applied to the endpoint's latest finished scan,
first match wins:

- not_scanned: no scan has finished yet.
- errored: the latest scan errored on our side (dead worker, refused address…): we know
  nothing new about the endpoint; the cause is the scan's error reason.
- down: the preflight stopped the scan before any load (nothing listening, wrong model,
  bad key…), or no request of any level succeeded (error_rate = 1). The cause is the
  preflight's cause, else the report's failure summary.
- below_floor: the grade is worse than the endpoint's SLO grade floor (no letter is below
  every floor, as for alerts and `tokvera scan --fail-under`).
- degraded: a counted check failed, or the error rate is over its warn bound (its status is
  not "pass"), or the server's /models does not list the requested model (the report's
  preflight.warnings "model_not_listed": the grade is of whatever answered). The cause names
  the check and its value, and the failure summary when requests failed; the model warning,
  in the report's words, leads it.
- up: none of the above.

The liveness probes' confirmed verdict is laid over it (with_liveness): down between scans,
degraded from a minority of locations, up again before the next graded scan.

Problems sort first (SEVERITY). "Since" is the first scan of the unbroken run of the same state
ending at the latest scan (looked for among the last SINCE_SCANS finished scans).

Everything a state needs is read in SQL: the report's failure summary and preflight fields
from the columns written as it was stored, the failing checks from CheckResult; reports are
never read here.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db.models import F, OuterRef, Q, Subquery

from accounts.tenancy import scoped_to_teams
from scans import maintenance
from scans.grader import CHECK_LABELS, CHECKS, format_check_value, is_below_floor
from scans.models import CheckResult, Endpoint, Scan, ScanStatus

__all__ = ["LABELS", "SEVERITY", "EndpointState", "Headline", "current", "during_maintenance",
           "headline", "newest_per_endpoint", "of_scan", "state_history", "states_for",
           "with_liveness"]

UP, DEGRADED, DOWN, BELOW_FLOOR, NOT_SCANNED, ERRORED = (
    "up", "degraded", "down", "below_floor", "not_scanned", "errored")
LABELS = {UP: "up", DEGRADED: "degraded", DOWN: "down", BELOW_FLOOR: "below floor",
          NOT_SCANNED: "not yet scanned", ERRORED: "errored on our side"}
# Shown by the pages only (during_maintenance), never read from a scan: while a maintenance
# window covers the endpoint it is in maintenance, whatever its scans say.
MAINTENANCE = "maintenance"
SHOWN_LABELS = {**LABELS, MAINTENANCE: "in maintenance"}
# Worst first: the dashboard lists problems first in this order.
SEVERITY = (DOWN, BELOW_FLOOR, DEGRADED, ERRORED, MAINTENANCE, NOT_SCANNED, UP)
# A number per state for Prometheus (0 is good, higher is worse; documented in docs/metrics.md).
STATE_NUMBERS = {UP: 0, DEGRADED: 1, BELOW_FLOOR: 2, DOWN: 3, ERRORED: 4, NOT_SCANNED: 5}
SINCE_SCANS = 200
ERROR_RATE = "error_rate"
UNITS = {check.id: check.unit for check in CHECKS}  # from the one check table


@dataclass(frozen=True)
class EndpointState:
    state: str
    cause: str  # one sentence; "" when up
    scan_id: Any = None  # public id of the scan it was read from (None: never scanned)
    at: datetime | None = None  # that scan's time
    since: datetime | None = None  # first scan of the current run of this state
    grade: str = ""
    points: float | None = None
    measured: EndpointState | None = None  # in maintenance: the state its latest scan gave

    @property
    def label(self) -> str:
        return SHOWN_LABELS[self.state]

    @property
    def is_problem(self) -> bool:
        return self.state in (DOWN, BELOW_FLOOR, DEGRADED, ERRORED)

    @property
    def severity(self) -> int:
        return SEVERITY.index(self.state)

    @property
    def number(self) -> int:
        return STATE_NUMBERS[self.state]


# Columns written from the report as it was stored (scans/running/worker.py report_columns): a state
# never reads a report.
_FIELDS = {
    "stopped": F("preflight_stopped"),
    "cause": F("preflight_cause"),
    "summary": F("failure_summary"),
    "warnings": F("preflight_warnings"),  # a small list, absent in older reports
}


def _rows(scans) -> list[dict]:
    return list(scans.values(
        "pk", "public_id", "endpoint_id", "status", "error_reason", "grade", "points", "down",
        "queued_at", **_FIELDS))


def _bad_checks(team_ids: Iterable[int], scan_pks: list[int]) -> dict[int, list[dict]]:
    """Per scan: its failing checks and its error rate row (any status), worst first."""
    result: dict[int, list[dict]] = {}
    if not scan_pks:
        return result
    rows = (scoped_to_teams(CheckResult, team_ids)
            .filter(Q(status="fail") | Q(check_id=ERROR_RATE), scan_id__in=scan_pks)
            .values("scan_id", "check_id", "value", "status").order_by("scan_id", "check_id"))
    for r in rows:
        result.setdefault(r["scan_id"], []).append(r)
    return result


def _describe(check: dict) -> str:
    label = CHECK_LABELS.get(check["check_id"], check["check_id"])
    value = format_check_value(check["value"], UNITS.get(check["check_id"], ""))
    verdict = "over the warn bound" if check["status"] == "warn" else "failed"
    return f"{label[0].lower()}{label[1:]}: {value} ({verdict})"


def model_warning(warnings: Any) -> str:
    """The preflight's "model_not_listed" warning, as the report words it ("" when none): the
    server's /models does not list the model asked for, so the grade is of whatever answered."""
    for warning in warnings if isinstance(warnings, list) else []:
        if isinstance(warning, dict) and warning.get("kind") == "model_not_listed":
            message = warning.get("message")
            if isinstance(message, str) and message:
                return message
            return f"the server does not list model '{warning.get('model', '?')}'"
    return ""


def _classify(row: dict, checks: list[dict], floor: str) -> tuple[str, str]:
    """(state, cause) of one finished scan."""
    if row["status"] == ScanStatus.ERRORED:
        return ERRORED, row["error_reason"] or "the scan errored on our side"
    if row["down"]:  # decided once, as the scan was stored (scans.grader.is_down)
        if row["stopped"]:
            return DOWN, (row["cause"] or row["summary"]
                          or "the preflight stopped the scan")
        return DOWN, row["summary"] or "no request succeeded"
    failing = [c for c in checks if c["status"] == "fail"
               or (c["check_id"] == ERROR_RATE and c["status"] == "warn")]
    detail = "; ".join(_describe(c) for c in failing)
    if row["summary"]:
        detail = f"{detail}; {row['summary']}" if detail else row["summary"]
    unlisted = model_warning(row.get("warnings"))
    if unlisted:  # leads: it says what the other figures are figures of
        detail = f"{unlisted}; {detail}" if detail else unlisted
    if is_below_floor(row["grade"], floor):
        grade = (f"grade {row['grade']}" if row["grade"] and len(row["grade"]) == 1
                 else "no grade (not enough evidence)")
        cause = f"{grade}, below the floor {floor}"
        return BELOW_FLOOR, f"{cause}: {detail}" if detail else cause
    if failing or unlisted:
        return DEGRADED, detail
    return UP, ""


def newest_per_endpoint(scans, team_ids, endpoint_ids: list[int]):
    """`scans` (a scoped queryset) cut to each endpoint's newest by queued_at: one index read
    (scan_endpoint_time) per endpoint, where DISTINCT ON sorted every scan the endpoints ever
    had, so its cost grew with the history rather than with the endpoints."""
    newest = scans.filter(endpoint_id=OuterRef("pk")).order_by("-queued_at", "-pk").values("pk")[:1]
    return scans.filter(pk__in=scoped_to_teams(Endpoint, team_ids).filter(pk__in=endpoint_ids)
                        .annotate(newest=Subquery(newest)).values("newest"))


def _finished(team_ids):
    return scoped_to_teams(Scan, team_ids).filter(
        status__in=[ScanStatus.SUCCEEDED, ScanStatus.ERRORED])


def _state(endpoint: Endpoint, row: dict, checks: list[dict]) -> EndpointState:
    state, cause = _classify(row, checks, endpoint.slo_grade_floor)
    points = float(row["points"]) if row["points"] is not None else None
    return EndpointState(state, cause, row["public_id"], row["queued_at"], row["queued_at"],
                         row["grade"], points)


def states_for(endpoints: Iterable[Endpoint]) -> dict[int, EndpointState]:
    """Each endpoint's state from its latest finished scan (keyed by endpoint id), in two
    queries for any number of endpoints. The endpoints must be ones the caller may see."""
    endpoints = list(endpoints)
    if not endpoints:
        return {}
    team_ids = {e.team_id for e in endpoints}
    latest = _rows(newest_per_endpoint(_finished(team_ids), team_ids, [e.pk for e in endpoints]))
    by_endpoint = {r["endpoint_id"]: r for r in latest}
    checks = _bad_checks(team_ids, [r["pk"] for r in latest])
    result = {}
    for endpoint in endpoints:
        row = by_endpoint.get(endpoint.pk)
        measured = (_state(endpoint, row, checks.get(row["pk"], [])) if row
                    else EndpointState(NOT_SCANNED, "no scan has finished yet"))
        result[endpoint.pk] = with_liveness(endpoint, measured)
    return result


def with_liveness(endpoint: Endpoint, measured: EndpointState) -> EndpointState:
    """The scans' state with the liveness probes' confirmed verdict laid over it
    (scans/liveness/): probes run between scans, so what they confirmed is the news.

    - down (a majority of locations): down, with the probes' cause, whatever the last scan
      said; the grade stays the last scan's.
    - degraded (a minority): an endpoint the scans call up is degraded, "unreachable from …";
      a worse state from the scans stays.
    - up: an endpoint the last scan found down answers again once probes after that scan
      confirm it (a graded scan follows soon and says how well).
    """
    live, since = endpoint.liveness, endpoint.liveness_since
    if not live or since is None:
        return measured
    if live == DOWN:
        began = min(since, measured.since) if measured.state == DOWN and measured.since else since
        return EndpointState(DOWN, endpoint.liveness_cause, measured.scan_id, measured.at,
                             began, measured.grade, measured.points)
    if live == DEGRADED and measured.state == UP:
        return EndpointState(DEGRADED, endpoint.liveness_cause, measured.scan_id, measured.at,
                             since, measured.grade, measured.points)
    if live == UP and measured.state == DOWN and measured.at is not None and since > measured.at:
        return EndpointState(UP, "", measured.scan_id, measured.at, since, measured.grade,
                             measured.points)
    return measured


def of_scan(endpoint: Endpoint, scan: Scan) -> EndpointState:
    """The state one finished scan put the endpoint in (what an alert about it reports)."""
    rows = _rows(_finished([endpoint.team_id]).filter(pk=scan.pk))
    if not rows:
        return EndpointState(NOT_SCANNED, "no scan has finished yet")
    checks = _bad_checks([endpoint.team_id], [scan.pk])
    return _state(endpoint, rows[0], checks.get(scan.pk, []))


def state_history(endpoint: Endpoint, n: int = SINCE_SCANS) -> list[EndpointState]:
    """The state after each of the endpoint's last `n` finished scans, newest first."""
    rows = _rows(_finished([endpoint.team_id]).filter(endpoint=endpoint)
                 .order_by("-queued_at", "-pk")[:n])
    checks = _bad_checks([endpoint.team_id], [r["pk"] for r in rows])
    return [_state(endpoint, r, checks.get(r["pk"], [])) for r in rows]


def current(endpoint: Endpoint) -> EndpointState:
    """The endpoint's state with `since`: when the current run of this state began."""
    states = state_history(endpoint)
    if not states:
        return with_liveness(endpoint, EndpointState(NOT_SCANNED, "no scan has finished yet"))
    since = states[0].at
    for earlier in states[1:]:
        if earlier.state != states[0].state:
            break
        since = earlier.at
    first = states[0]
    return with_liveness(endpoint, EndpointState(first.state, first.cause, first.scan_id,
                                                 first.at, since, first.grade, first.points))


def during_maintenance(endpoints: Iterable[Endpoint], states: dict[int, EndpointState],
                       now: datetime) -> dict[int, EndpointState]:
    """`states` with each endpoint a maintenance window covers at `now` shown as in
    maintenance (since the window began), its measured state kept beside it in the cause:
    work that was announced is not an outage on the pages (alerts are held the same way)."""
    covered = maintenance.covering_now(endpoints, now)
    result = dict(states)
    for pk, occurrence in covered.items():
        measured = states.get(pk)
        if measured is None:
            continue
        cause = (f"maintenance window “{occurrence.window.name}” until "
                 f"{occurrence.end.astimezone(UTC):%Y-%m-%d %H:%M} UTC")
        if measured.state != NOT_SCANNED:
            cause += f"; latest scan: {measured.label}"
            if measured.cause:
                cause += f" ({measured.cause})"
        result[pk] = EndpointState(MAINTENANCE, cause, measured.scan_id, measured.at,
                                   occurrence.start, measured.grade, measured.points, measured)
    return result


# --- the headline numbers of the latest graded scan -------------------------------------------


@dataclass(frozen=True)
class Headline:
    scan_id: Any
    at: datetime
    ttft_p50_ms: float | None
    ttft_p95_ms: float | None
    tokens_per_s: float | None
    tokens_basis: str
    error_rate: float | None
    # reasoning models: first answer token and time spent thinking (None when it never thought)
    first_answer_p50_ms: float | None
    thinking_p50_ms: float | None
    # what the server said of itself in that scan, one line ("" when it said nothing)
    server: str = ""

    @property
    def reasoning(self) -> bool:
        return self.first_answer_p50_ms is not None or self.thinking_p50_ms is not None


def headline(endpoint: Endpoint) -> Headline | None:
    """TTFT p50/p95, tokens/s and error rate (one request at a time) of the latest succeeded
    scan; for reasoning models also the first-answer TTFT and thinking time (its columns, no
    report read)."""
    row = (Scan.objects.for_team(endpoint.team_id)
           .filter(endpoint=endpoint, status=ScanStatus.SUCCEEDED)
           .order_by("-queued_at", "-pk")
           .values("public_id", "queued_at", "ttft_p50_ms", "ttft_p95_ms", "tokens_per_s",
                   "tokens_basis", "first_answer_p50_ms", "thinking_p50_ms",
                   "server_label").first())
    if row is None:
        return None
    error_rate = (CheckResult.objects.for_team(endpoint.team_id)
                  .filter(scan__public_id=row["public_id"], check_id=ERROR_RATE)
                  .values_list("value", flat=True).first())
    return Headline(
        scan_id=row["public_id"], at=row["queued_at"],
        ttft_p50_ms=row["ttft_p50_ms"], ttft_p95_ms=row["ttft_p95_ms"],
        tokens_per_s=row["tokens_per_s"], tokens_basis=row["tokens_basis"] or "tokens",
        error_rate=error_rate,
        first_answer_p50_ms=row["first_answer_p50_ms"],
        thinking_p50_ms=row["thinking_p50_ms"],
        server=row["server_label"],
    )
