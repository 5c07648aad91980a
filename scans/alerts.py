"""Alerts: an endpoint going down (or up again), falling below its SLO grade floor, or scans
erroring N times in a row.

Each is a state on the endpoint (below_floor, erroring) flipped by a conditional UPDATE, so a
message goes out once per change of state, with a recovery message when it flips back. Down
is read from the scans' states (scans/state.py): a message when a scan finds the endpoint down
after one that did not (and back), sent once per scan (a cache key), replacing the floor
message that would say the same. The SLO's multi-window burn-rate alerts (scans/slo.py) page
when a fast pair fires and file a ticket for a slow one, once per episode (the level sent is
kept on the endpoint), with a recovery message when no pair fires any more.
Messages go by email to the team's owners and admins and, optionally, to a webhook signed
with HMAC-SHA256 and sent through the site's outbound guard. The two delivery tasks live here,
beside what they deliver, under their scans.tasks.* names (so alerts and tasks import each
other no more: scans.tasks re-exports them for the worker).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
from functools import partial

import httpx
from celery import shared_task
from django.conf import settings
from django.core.cache import cache
from django.core.mail import send_mail
from django.db import transaction

from accounts import encryption
from accounts.models import Membership, Role
from accounts.validators import one_line
from scans import slo, state
from scans.grader.scoring import is_below_floor
from scans.grader.transport import ScanTransport
from scans.models import CapacityOutcome, Endpoint, Scan, ScanStatus
from scans.outbound import check_url, guard
from scans.system_wide import ALL_ENDPOINTS

log = logging.getLogger(__name__)

SIGNATURE_HEADER = "X-Tokvera-Signature"
# How many recent finished scans _down_change looks through for this scan and the one before.
DOWN_LOOKBACK = 20


def _flip(endpoint: Endpoint, field: str, new: bool) -> bool:
    """Set the alert state; True only for the one caller that changed it."""
    won = Endpoint.objects.for_team(endpoint.team_id).filter(pk=endpoint.pk, **{field: not new}).update(
        **{field: new}
    )
    return bool(won)


def _errored_streak(endpoint: Endpoint, limit: int) -> int:
    recent = (
        Scan.objects.for_team(endpoint.team_id).filter(
            endpoint=endpoint, status__in=[ScanStatus.SUCCEEDED, ScanStatus.ERRORED]
        )
        .order_by("-finished_at")
        .values_list("status", flat=True)[:limit]
    )
    streak = 0
    for status in recent:
        if status != ScanStatus.ERRORED:
            break
        streak += 1
    return streak


def _down_change(endpoint: Endpoint, scan: Scan) -> tuple[str, str] | None:
    """("down", cause) when this scan finds the endpoint down and the scan before it (errored
    scans skipped: they say nothing about the endpoint) did not; ("down_recovered", …) the
    other way round. At most once per scan, even if this runs again (a cache key)."""
    states = state.state_history(endpoint, n=DOWN_LOOKBACK)
    mine = next((i for i, s in enumerate(states) if s.scan_id == scan.public_id), None)
    if mine is None:
        return None
    before = next((s for s in states[mine + 1:] if s.state != state.ERRORED), None)
    now_down = states[mine].state == state.DOWN
    was_down = before is not None and before.state == state.DOWN
    if now_down == was_down or (before is None and not now_down):
        return None
    if not cache.add(f"tokvera:down-alert:{scan.public_id}", 1, timeout=7 * 86400):
        return None  # already sent for this scan
    if now_down:
        return ("down", f"the endpoint is down: {states[mine].cause}")
    return ("down_recovered", f"the endpoint answers again ({states[mine].label})")


# --- SLO burn-rate alerts (scans/slo.py's BURN_PAIRS; docs/slo.md) ---------------------------
# The window whose figures an SLO message carries (the dashboard's); the pairs' rates do not
# depend on it (their spans are at most 3 days).
SLO_ALERT_WINDOW_DAYS = 7
SLO_EVENTS = {"page": "slo_breaching", "ticket": "slo_at_risk", "": "slo_recovered"}
_BURN_RANK = {"": 0, "ticket": 1, "page": 2}


def _slo_burn_change(endpoint: Endpoint, scan: Scan) -> tuple[str, str] | None:
    """("slo_breaching", detail) when a fast burn-rate pair starts firing, ("slo_at_risk", …)
    when only a slow one does, ("slo_recovered", …) when no pair's two rates reach its
    threshold any more after one fired.
    Once per episode: a calmer level while still burning (page → ticket) sends nothing, and a
    conditional UPDATE of Endpoint.slo_burn_alert lets one caller send each change."""
    current = slo.window(endpoint, SLO_ALERT_WINDOW_DAYS, now=scan.finished_at)
    level, sent = current.alert_level, endpoint.slo_burn_alert
    if level == sent or (level and _BURN_RANK[level] < _BURN_RANK[sent]):
        return None
    if sent and not level and current.still_burning:
        return None  # the episode goes on: a recovery only when no pair's rates reach it
    won = Endpoint.objects.for_team(endpoint.team_id).filter(
        pk=endpoint.pk, slo_burn_alert=sent).update(slo_burn_alert=level)
    if not won:
        return None  # another scan's alert got there first
    measured = (f"{current.share:.1%} of the covered time of the last {current.days} days "
                f"was good (objective {current.objective:.1%})" if current.enough else
                current.empty_message)
    if level:
        pair = next(w for w in current.alert_windows if w["firing"] and w["level"] == level)
        return (SLO_EVENTS[level],
                f"the SLO's error budget burns at {slo.rate_text(pair['long_rate'])} over the "
                f"last {slo.span_text(pair['long_s'])} and "
                f"{slo.rate_text(pair['short_rate'])} over the last "
                f"{slo.span_text(pair['short_s'])} ({level} at {pair['threshold']:g}× or more); "
                f"{measured}")
    return ("slo_recovered", f"no burn-rate alert fires any more; {measured}")


def slo_message(endpoint: Endpoint, scan: Scan) -> dict:
    """The SLO figures an SLO alert carries, as of the scan that raised it."""
    current = slo.window(endpoint, SLO_ALERT_WINDOW_DAYS, now=scan.finished_at)
    return {
        "status": current.status, "reason": current.status_reason,
        "window_days": current.days, "objective": current.objective,
        "good_share_of_covered": current.share, "covered_s": current.covered_s,
        "burn_rates": [{"span": b["span"], "span_s": b["span_s"], "rate": b["rate"],
                        "covered_s": b["covered_s"]} for b in current.burn],
        "firing": [{"level": w["level"], "windows": w["label"], "threshold": w["threshold"]}
                   for w in current.alert_windows if w["firing"]],
        "url": f"{settings.SITE_URL}/endpoints/{endpoint.public_id}/#slo",
    }


# --- capacity within the SLO (issue 22) ------------------------------------------------------
CAPACITY_EVENTS = ("capacity_low", "capacity_recovered")


def _capacity_change(endpoint: Endpoint, scan: Scan) -> tuple[str, str] | None:
    """("capacity_low", detail) when a scan that searched finds fewer concurrent streams within
    the SLO than the endpoint's capacity_alert_below, ("capacity_recovered", …) when one finds
    at least that many again; once per change (Endpoint.capacity_low, flipped by a conditional
    UPDATE). A scan that did not search says nothing; nor does one whose search stopped at its
    bound below the threshold while every level it tried met the SLO (the capacity may be
    higher)."""
    threshold = endpoint.capacity_alert_below
    if threshold is None or not scan.capacity_outcome:
        return None
    streams = scan.capacity_concurrency or 0
    if scan.capacity_outcome == CapacityOutcome.MET_AT_HIGHEST and streams < threshold:
        return None
    low = streams < threshold
    if low == endpoint.capacity_low or not _flip(endpoint, "capacity_low", low):
        return None
    if low:
        found = ("no level met the SLO" if scan.capacity_outcome == CapacityOutcome.NONE_MET
                 else f"it serves up to {streams} concurrent stream{'s' * (streams != 1)} "
                      "within the SLO")
        return ("capacity_low", f"capacity dropped below {threshold} streams: {found}")
    return ("capacity_recovered", f"capacity is back to {streams} concurrent streams within the "
                                  f"SLO (the alert is below {threshold})")


def capacity_message(scan: Scan) -> dict:
    """The capacity figures a capacity alert carries, as of the scan that raised it."""
    return {"outcome": scan.capacity_outcome, "concurrency": scan.capacity_concurrency,
            "requests_per_s": scan.capacity_requests_per_s,
            "output_tokens_per_s": scan.capacity_output_tokens_per_s,
            "output_unit": scan.capacity_output_unit or None}


def after_scan(scan: Scan) -> None:
    # Read again (its alert states may have just changed), within the scan's own team.
    endpoint = (Endpoint.objects.for_team(scan.endpoint.team_id).select_related("team")
                .get(pk=scan.endpoint_id))
    events = []
    if scan.status == ScanStatus.ERRORED:
        if _errored_streak(endpoint, endpoint.alert_after_errors) >= endpoint.alert_after_errors:
            if _flip(endpoint, "erroring", True):
                events.append(("erroring", f"{endpoint.alert_after_errors} scans in a row errored; "
                                           f"last reason: {scan.error_reason}"))
    elif scan.status == ScanStatus.SUCCEEDED:
        if endpoint.erroring and _flip(endpoint, "erroring", False):
            events.append(("erroring_recovered", "scans are running again"))
        below = is_below_floor(scan.grade, endpoint.slo_grade_floor)
        if below != endpoint.below_floor and _flip(endpoint, "below_floor", below):
            if below:
                events.append(("below_floor", f"grade {scan.grade} is below the floor "
                                              f"{endpoint.slo_grade_floor}"))
            else:
                events.append(("floor_recovered", f"grade {scan.grade} meets the floor "
                                                  f"{endpoint.slo_grade_floor} again"))
        change = _down_change(endpoint, scan)
        if change is not None:
            # One message for one piece of news: "down" says more than "below floor" (a down
            # endpoint grades F), and "up again" more than "floor recovered".
            same_news = {"down": "below_floor", "down_recovered": "floor_recovered"}[change[0]]
            events = [e for e in events if e[0] != same_news] + [change]
        if (burn := _slo_burn_change(endpoint, scan)) is not None:
            events.append(burn)
        if (capacity := _capacity_change(endpoint, scan)) is not None:
            events.append(capacity)
    for kind, detail in events:
        # A task, so a mail server hiccup is retried instead of losing the one message
        # this change of state gets.
        transaction.on_commit(partial(send_alert.delay, endpoint.pk, scan.pk, kind, detail))


def payload(endpoint: Endpoint, scan: Scan, kind: str, detail: str) -> dict:
    # What the scan says about the endpoint: "down" with "connection refused", not only a grade.
    current = state.of_scan(endpoint, scan)
    return {
        "event": kind,
        "detail": detail,
        "state": current.state,
        "cause": current.cause,
        "endpoint": {"id": str(endpoint.public_id), "name": endpoint.name},
        "scan": {"id": str(scan.public_id), "status": scan.status, "grade": scan.grade or None,
                 "scoring_version": scan.scoring_version or None},
        "url": f"{settings.SITE_URL}/scans/{scan.public_id}/",
        **({"slo": slo_message(endpoint, scan)} if kind in SLO_EVENTS.values() else {}),
        **({"capacity": capacity_message(scan)} if kind in CAPACITY_EVENTS else {}),
    }


def sign(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def notify(endpoint_id: int, scan_id: int, kind: str, detail: str) -> None:
    # Task step: the ids came from our own alert code; the endpoint names the team.
    endpoint = ALL_ENDPOINTS.select_related("team").filter(pk=endpoint_id).first()
    scan = None if endpoint is None else Scan.objects.for_team(endpoint.team_id).filter(pk=scan_id).first()
    if endpoint is None or scan is None:
        return  # deleted since: nobody is left to tell
    message = payload(endpoint, scan, kind, detail)
    if endpoint.alert_email:
        recipients = list(
            Membership.objects.for_team(endpoint.team_id).filter(
                role__in=[Role.OWNER, Role.ADMIN]
            ).exclude(user__email="").values_list("user__email", flat=True)
        )
        if recipients:
            send_mail(
                # one line whatever was stored: a line break in a subject is a BadHeaderError
                subject=one_line(f"[Tokvera] {endpoint.name}: {kind.replace('_', ' ')}"),
                message=(f"{endpoint.name} ({endpoint.team.name}): {detail}\n\n"
                         f"State: {state.LABELS[message['state']]}\n"
                         + (f"Cause: {message['cause']}\n" if message["cause"] else "")
                         + f"\nThe scan: {message['url']}\n"
                         + (f"The SLO: {message['slo']['url']}\n" if "slo" in message else "")),
                from_email=None,
                recipient_list=recipients,
            )
    if endpoint.webhook_url:
        send_webhook.delay(endpoint_id, message)


def deliver_webhook(endpoint: Endpoint, message: dict) -> int:
    """POST the signed message through the outbound guard; returns the HTTP status."""
    check_url(endpoint.webhook_url)  # a clear refusal up front; the guard checks each connect

    body = json.dumps(message, separators=(",", ":"), sort_keys=True).encode()
    secret = encryption.decrypt(endpoint.webhook_secret_encrypted)
    headers = {"Content-Type": "application/json"}
    if secret:
        headers[SIGNATURE_HEADER] = sign(secret, body)

    async def post() -> int:
        transport = ScanTransport(connect_guard=guard)
        async with httpx.AsyncClient(transport=transport, timeout=10, follow_redirects=False) as c:
            response = await c.post(endpoint.webhook_url, content=body, headers=headers)
            return response.status_code

    return asyncio.run(post())


# --- delivery tasks (named as before the move, so queued messages still find them) -----------


@shared_task(name="scans.tasks.send_alert", bind=True, max_retries=5, default_retry_delay=60)
def send_alert(self, endpoint_id: int, scan_id: int, kind: str, detail: str) -> None:
    """Email the team's owners and admins, and queue the webhook, for one alert event."""
    try:
        notify(endpoint_id, scan_id, kind, detail)
    except OSError as exc:  # SMTP and socket errors: try again later
        raise self.retry(exc=exc) from None


@shared_task(name="scans.tasks.send_webhook", bind=True, max_retries=5, default_retry_delay=60)
def send_webhook(self, endpoint_id: int, message: dict) -> int | None:
    # Task step: the id came from our own alert code; no team is known here.
    endpoint = ALL_ENDPOINTS.filter(pk=endpoint_id).first()
    if endpoint is None or not endpoint.webhook_url:
        return None
    try:
        status = deliver_webhook(endpoint, message)
    except Exception as exc:
        log.warning("webhook for endpoint %s failed: %s", endpoint_id, type(exc).__name__)
        raise self.retry(exc=exc) from None
    if status >= 500:
        raise self.retry()
    return status
