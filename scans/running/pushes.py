"""Pushed reports: `tokvera scan --publish` → ``POST /api/v1/endpoints/{id}/reports``.

Proving a report costs seconds of CPU (a maximum-size one, 8 MiB and 2,000 request timelines,
about 6 s), so the web request does only what is cheap and the rest runs on the proof workers
(Celery queue ``proofs``, a worker of its own with bounded concurrency; docs/operations.md).

In the request, ``receive_report``, in the order that keeps a hostile upload cheap:

1. size: a body over ``REPORT_MAX_BYTES`` is refused before it is read or parsed (413);
2. the endpoint takes pushes: a pushed-only endpoint always does, a scheduled one only with
   ``accepts_pushes`` on (409 otherwise: the site measures it itself);
3. digest: the SHA-256 of the body as uploaded; a replay returns the stored scan, counted in
   ``REPORT_REPLAY_LIMIT`` per endpoint per window (429 past it);
4. rate: at most ``REPORT_PUSH_LIMIT`` new reports per endpoint per ``REPORT_PUSH_WINDOW_S``;
5. budget: at most ``REPORT_TEAM_BYTES`` bytes of new reports per team per
   ``REPORT_TEAM_BYTES_WINDOW_S`` (429 with Retry-After: a token can make many endpoints), and
   at most ``REPORT_ACCOUNT_BYTES`` per account per ``REPORT_ACCOUNT_BYTES_WINDOW_S``: the user
   who pushes, or the account that made the token (an account can make teams, each with a
   budget of its own; a token an operator made with ``createtoken`` has no account, and its
   team's budget alone applies);
6. the body is stored (``PushedReportBody``) with a queued pushed scan, and a proof turn is
   sent; the answer is 202 with the scan's URL.

The queue ``proofs`` is shared by every team, so a message is a turn, not a report: each upload
sends one, and the worker that runs it proves whichever queued report is due (``claim_turn``):
the one of the team whose last proof started longest ago (or not within
``REPORT_PROOF_GRACE_S``), that team's oldest first. Teams are served in turn, so one team's
backlog never holds another team's report behind all of it.

On a proof worker, ``prove_pending``: parse (JSON, nesting bounded), schema, model, origin (the
report's ``target.base_url`` must be the endpoint's scheme://host:port), then the proof: every
check recomputed from the report's own samples (scans/grader/proof.py). A claim its samples do
not give, or an impossible sample, refuses the report: the scan becomes ``refused`` with the
reasons in ``error_reason``, one per line. Otherwise the recomputed report is stored
(``succeeded``). The body is deleted either way.

Each limit can be overridden by a Django setting of the same name.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache

import jsonschema
from celery import current_app as celery_app  # the site's app (tokvera_site/celery.py)
from django.conf import settings
from django.db import connection, transaction
from django.db.models import OuterRef, Subquery
from django.utils import timezone
from kombu.exceptions import OperationalError as BrokerUnreachable

from common import parsers, ratelimit, time_partitions
from scans import origins
from scans.grader import REPORT_SCHEMA_PATH, ImpossibleReport, ReportDisagrees, prove_report
from scans.models import (
    Endpoint,
    EndpointMode,
    ProofTurn,
    PushedReportBody,
    Scan,
    ScanStatus,
    ScanTrigger,
)
from scans.running import dispatch, worker
from scans.system_wide import ALL_ENDPOINTS, ALL_SCANS

__all__ = [
    "PROOF_QUEUE",
    "PushNotQueued",
    "PushRateLimited",
    "PushesNotAccepted",
    "ReportRefused",
    "ReportTooLarge",
    "claim_turn",
    "limit",
    "prove_pending",
    "receive_report",
    "refuse_oversized",
    "report_schema",
]

log = logging.getLogger(__name__)

# Package data (a link to docs/report.schema.json in a checkout, the file itself in a wheel).
SCHEMA_PATH = REPORT_SCHEMA_PATH
# The Celery queue of the proof workers (`celery -A tokvera_site worker -Q proofs`).
PROOF_QUEUE = "proofs"
PROVE_TASK = "scans.tasks.prove_pushed_report"  # the task a pushed report is sent to

DEFAULTS = {
    # A default scan's report is about 100 KB; 2,000 requests of 128 tokens at each of four
    # levels is about 6 MB. Parsing and proving 8 MB takes a few seconds of CPU: the ceiling.
    "REPORT_MAX_BYTES": 8 * 1024 * 1024,
    # New (not replayed) reports per endpoint: one every 5 minutes on average, with bursts.
    "REPORT_PUSH_LIMIT": 12,
    "REPORT_PUSH_WINDOW_S": 3600,
    # Replays (the same bytes again: a retried upload) per endpoint per REPORT_PUSH_WINDOW_S.
    # One costs a read and a digest, no proof; the limit keeps a loop of them from adding up.
    "REPORT_REPLAY_LIMIT": 60,
    # Bytes of new reports per team per window: 32 maximum-size reports an hour (about 3 CPU-
    # minutes of proof), or a few thousand default-size ones.
    "REPORT_TEAM_BYTES": 256 * 1024 * 1024,
    "REPORT_TEAM_BYTES_WINDOW_S": 3600,
    # Bytes of new reports per account, all its teams together: as much as one team's, so an
    # account that makes more teams gets no more proof time.
    "REPORT_ACCOUNT_BYTES": 256 * 1024 * 1024,
    "REPORT_ACCOUNT_BYTES_WINDOW_S": 3600,
    # A pushed report no proof worker took within this long is errored by the reaper.
    "REPORT_PROOF_GRACE_S": 1800,
}

# How long a proof may run before the reaper calls its worker dead (with the heartbeat).
PROOF_DEADLINE = timedelta(minutes=10)


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
    def __init__(self, message: str, retry_after_s: int):
        self.retry_after_s = retry_after_s
        super().__init__(f"{message}; try again in {retry_after_s} s")


class PushesNotAccepted(Exception):
    """A scheduled endpoint that does not take pushed reports."""

    def __init__(self):
        super().__init__("this endpoint is scanned by the site on a schedule and does not accept "
                         "pushed reports; turn on accepts_pushes to take them as well, or make "
                         "it a pushed endpoint")


class PushNotQueued(Exception):
    """The task queue could not take the proof: nothing was kept."""

    retry_after_s = dispatch.BROKER_RETRY_AFTER_S


class ReportRefused(Exception):
    """The report is not stored; `messages` say why (each names the field)."""

    def __init__(self, messages: list[str]):
        self.messages = messages
        super().__init__("; ".join(messages))


@dataclass(frozen=True)
class Received:
    scan: Scan
    created: bool  # False: this exact report was already received (a replay)


def takes_pushes(endpoint: Endpoint) -> bool:
    return endpoint.mode == EndpointMode.PUSHED or endpoint.accepts_pushes


def refuse_oversized(declared_length: str | int | None) -> None:
    """Raise ReportTooLarge when a request's Content-Length is over the limit, so an oversized
    upload is refused before its body is read."""
    try:
        size = int(declared_length or 0)
    except ValueError:
        return  # the body's own length is checked once read
    if size > limit("REPORT_MAX_BYTES"):
        raise ReportTooLarge(size)


def refuse_unwanted(endpoint: Endpoint) -> None:
    """Raise PushesNotAccepted for a scheduled endpoint without accepts_pushes (before the body
    is read)."""
    if not takes_pushes(endpoint):
        raise PushesNotAccepted()


def receive_report(endpoint: Endpoint, body: bytes, account_id: int | None = None) -> Received:
    """The request's part: the cheap checks, then the body stored with a queued pushed scan and
    its proof sent to the proof workers (see the module docstring for the order). `account_id`
    is the account the push is charged to (the user, or the token's creator; None for a token
    no account made). Raises ReportTooLarge, PushesNotAccepted, PushRateLimited or
    PushNotQueued; nothing is kept then. Call it outside a transaction: the scan must be
    committed before a worker can see it."""
    if len(body) > limit("REPORT_MAX_BYTES"):
        raise ReportTooLarge(len(body))
    refuse_unwanted(endpoint)
    digest = hashlib.sha256(body).hexdigest()
    window = limit("REPORT_PUSH_WINDOW_S")
    already = endpoint.scans.filter(report_digest=digest).first()
    if already is not None:  # a retried upload: the same answer, nothing stored twice
        allowed, retry_after = ratelimit.allow("report-replay", str(endpoint.public_id),
                                               limit("REPORT_REPLAY_LIMIT"), window)
        if not allowed:
            raise PushRateLimited(f"at most {limit('REPORT_REPLAY_LIMIT')} replays of stored "
                                  f"reports per {window} s for one endpoint", retry_after)
        return Received(already, created=False)
    allowed, retry_after = ratelimit.allow("report-push", str(endpoint.public_id),
                                           limit("REPORT_PUSH_LIMIT"), window)
    if not allowed:
        raise PushRateLimited(f"at most {limit('REPORT_PUSH_LIMIT')} reports per {window} s "
                              "for one endpoint", retry_after)
    budget, budget_window = limit("REPORT_TEAM_BYTES"), limit("REPORT_TEAM_BYTES_WINDOW_S")
    allowed, retry_after = ratelimit.allow_weighted("report-bytes", str(endpoint.team_id),
                                                    len(body), budget, budget_window)
    if not allowed:
        raise PushRateLimited(f"at most {budget} bytes of pushed reports per {budget_window} s "
                              "for one team", retry_after)
    if account_id is not None:
        budget = limit("REPORT_ACCOUNT_BYTES")
        budget_window = limit("REPORT_ACCOUNT_BYTES_WINDOW_S")
        allowed, retry_after = ratelimit.allow_weighted("report-bytes-account", str(account_id),
                                                        len(body), budget, budget_window)
        if not allowed:
            raise PushRateLimited(f"at most {budget} bytes of pushed reports per "
                                  f"{budget_window} s for one account, all its teams together",
                                  retry_after)
    now = timezone.now()
    month = time_partitions.month_start(now)
    with transaction.atomic():
        # The same upload racing this one: they take turns, and the second finds the first's
        # scan (one_scan_per_pushed_report sees one month's partition only).
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s))",
                           [f"pushed report {endpoint.pk} {digest}"])
        already = endpoint.scans.filter(report_digest=digest).first()
        if already is not None:
            return Received(already, created=False)
        scan = Scan.objects.for_team(endpoint.team_id).create(
            endpoint=endpoint, trigger=ScanTrigger.PUSH, report_digest=digest,
            location="pushed", pushed=True, proof_team_id=endpoint.team_id,
            partition_month=month,
            deadline_at=now + timedelta(seconds=limit("REPORT_PROOF_GRACE_S")))
        PushedReportBody.objects.for_team(endpoint.team_id).create(scan=scan, body=body)
    try:
        send_proof(scan.pk)
    except BrokerUnreachable as exc:
        log.warning("pushed report for endpoint %s not queued: the broker is unreachable (%s)",
                    endpoint.pk, exc)
        # Any turn may prove any queued report: one may have claimed this one meanwhile. A
        # claimed report is kept (and proven on that turn); only an unclaimed one goes.
        deleted, _ = Scan.objects.for_team(endpoint.team_id).filter(
            pk=scan.pk, status=ScanStatus.QUEUED).delete()
        if not deleted:
            log.info("pushed scan %s was claimed by a proof turn before its own turn failed "
                     "to send: kept", scan.pk)
            scan.refresh_from_db()
            return Received(scan, created=True)
        raise PushNotQueued("The task queue is unreachable, so the report was not taken "
                            "(nothing was kept); try again in "
                            f"{PushNotQueued.retry_after_s} s.") from None
    return Received(scan, created=True)


def send_proof(scan_id: int) -> None:
    """One proof turn for the report just stored (whichever report is due runs on it).
    By name: the task module imports this one (the service its task runs)."""
    celery_app.tasks[PROVE_TASK].apply_async((scan_id,), queue=PROOF_QUEUE,
                                             routing_key=PROOF_QUEUE)


# --- on the proof worker ---------------------------------------------------------------------


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
    theirs, ours = _origin(report["target"]["base_url"]), _origin(endpoint.base_url)
    if theirs != ours:
        raise ReportRefused([f"target.base_url is on {theirs}, not this endpoint's origin "
                             f"{ours}: the report measured another server"])


def _origin(url: str) -> str:
    """scheme://host:port, normalised (lower case, the scheme's default port written out)."""
    try:
        return origins.origin_of(url.strip())
    except ValueError:  # a port that is not a number
        return repr(url)


def prove(endpoint: Endpoint, body: bytes) -> dict:
    """The recomputed report, or ReportRefused naming why."""
    report = _parse(body)
    _validate(report, endpoint)
    try:
        return prove_report(report)
    except (ImpossibleReport, ReportDisagrees) as exc:
        raise ReportRefused([str(exc)]) from None


# The queued pushed report whose turn it is, read from the partial index scan_proof_waiting
# (scans/migrations/0025): the distinct waiting teams by skipping through it (one probe per
# team), each team's oldest report as its first entry, and each team's last start from
# ProofTurn. What it reads grows with the number of waiting teams, never with their backlogs.
# A team whose last proof started before %(since)s counts as never served; ties go to the
# oldest report. Raw SQL: the ORM has no recursive query.
_DUE_SQL = """
WITH RECURSIVE waiting(team_id) AS (
    (SELECT s.proof_team_id FROM scans_scan AS s
     WHERE s.status = 'queued' AND s.trigger = 'push' AND s.proof_team_id IS NOT NULL
     ORDER BY s.proof_team_id LIMIT 1)
    UNION ALL
    SELECT (SELECT s.proof_team_id FROM scans_scan AS s
            WHERE s.status = 'queued' AND s.trigger = 'push' AND s.proof_team_id > w.team_id
            ORDER BY s.proof_team_id LIMIT 1)
    FROM waiting AS w WHERE w.team_id IS NOT NULL
)
SELECT oldest.id, w.team_id
FROM waiting AS w
CROSS JOIN LATERAL (
    SELECT s.id, s.queued_at FROM scans_scan AS s
    WHERE s.status = 'queued' AND s.trigger = 'push' AND s.proof_team_id = w.team_id
          AND s.id <> ALL(%(passed)s)
    ORDER BY s.queued_at, s.id LIMIT 1
) AS oldest
LEFT JOIN scans_proofturn AS turn
    ON turn.team_id = w.team_id AND turn.last_started_at > %(since)s
ORDER BY turn.last_started_at ASC NULLS FIRST, oldest.queued_at, oldest.id
LIMIT 1
"""


def _adopt_unmarked() -> None:
    """Give a queued pushed scan stored without proof_team (before the column, or by a web
    process of the previous release) its endpoint's team, so that a turn can choose it. The
    partial index finds none in one probe when there is none. A compatibility shim: it goes in
    the first release after 2027-03-01, when no web process of a release without the column runs."""
    ALL_SCANS.filter(status=ScanStatus.QUEUED, trigger=ScanTrigger.PUSH,
                     proof_team__isnull=True).update(
        proof_team_id=Subquery(ALL_ENDPOINTS.filter(pk=OuterRef("endpoint_id")).values("team_id")[:1]))


def _due(now: datetime, passed: list[int]) -> tuple[int, int] | None:
    """(scan id, team id) of the queued pushed report whose turn it is: of the team whose last
    proof started longest ago (a team with none within REPORT_PROOF_GRACE_S first), that team's
    oldest; None when none is queued (but those in `passed`)."""
    since = now - timedelta(seconds=limit("REPORT_PROOF_GRACE_S"))
    with connection.cursor() as cursor:
        cursor.execute(_DUE_SQL, {"passed": passed, "since": since})
        row = cursor.fetchone()
    return (row[0], row[1]) if row else None


def claim_turn() -> int | None:
    """Claim the queued pushed report whose turn it is (running, with its deadline), or None
    when none is queued. Several workers may claim at once: the conditional UPDATE's row count
    says who won a report, and a loser moves on to the next one due. The team's last start is
    written in the claim's transaction, so the next turn sees it as soon as the claim holds."""
    now = timezone.now()
    _adopt_unmarked()
    passed: list[int] = []
    while (due := _due(now, passed)) is not None:
        scan_id, team_id = due
        with transaction.atomic():
            claimed = ALL_SCANS.filter(pk=scan_id, status=ScanStatus.QUEUED,
                                       trigger=ScanTrigger.PUSH).update(
                status=ScanStatus.RUNNING, started_at=now, heartbeat_at=now,
                deadline_at=now + PROOF_DEADLINE)
            if claimed:
                ProofTurn.objects.for_team(team_id).bulk_create(
                    [ProofTurn(team_id=team_id, last_started_at=now)], update_conflicts=True,
                    unique_fields=["team"], update_fields=["last_started_at"])
                return scan_id
        passed.append(scan_id)
    return None


def prove_pending(scan_id: int) -> str:
    """One proof turn: prove the queued pushed report whose turn it is (claim_turn; the upload
    that sent this turn, `scan_id`, or another team's report that is due first) and store it
    (succeeded) or refuse it (refused, the reasons one per line). Each upload sends one turn,
    so every queued report gets one. Safe to run twice: a report is claimed by a conditional
    UPDATE, and a turn that finds none queued does nothing."""
    due = claim_turn()
    if due is None:
        return "not queued"
    if due != scan_id:
        log.info("proof turn of pushed scan %s went to pushed scan %s, due first", scan_id, due)
    scan_id = due
    scan = ALL_SCANS.select_related("endpoint").get(pk=scan_id)
    team = scan.endpoint.team_id
    bodies = PushedReportBody.objects.for_team(team)
    body = bodies.filter(scan_id=scan_id).values_list("body", flat=True).first()
    # Held in memory from here: the stored bytes go before any verdict can be read (a client
    # that sees the verdict never finds them; a proof cut short is reaped, "push it again").
    bodies.filter(scan_id=scan_id).delete()
    with worker.liveness(scan_id, team):
        try:
            if body is None:
                raise ReportRefused(["the uploaded report was not kept; push it again"])
            proven = prove(scan.endpoint, bytes(body))
        except ReportRefused as exc:
            Scan.objects.for_team(team).filter(pk=scan_id, status=ScanStatus.RUNNING).update(
                status=ScanStatus.REFUSED, finished_at=timezone.now(),
                error_reason="\n".join(exc.messages)[:4000])
            return "refused"
        scan = worker.store_report(scan, proven, pushed=True)
    return scan.status
