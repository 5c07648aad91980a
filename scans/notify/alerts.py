"""Alerts: an endpoint going down (or up again), falling below its SLO grade floor, or scans
erroring N times in a row.

Below the floor (and back) is news once the endpoint's last `confirm_after` graded scans agree;
until then the next scan is brought forward to confirm it. Down and up again come from the
liveness probes once they have a verdict (scans/liveness/, confirmed the same way).

Each is a state on the endpoint (below_floor, erroring) flipped by a conditional UPDATE, so a
message goes out once per change of state, with a recovery message when it flips back. Down
is read from the scans' states (scans/history/state.py): a message when a scan finds the endpoint down
after one that did not (and back), sent once per scan (a cache key), replacing the floor
message that would say the same. The SLO's multi-window burn-rate alerts (scans/history/slo_windows.py) page
when a fast pair fires and file a ticket for a slow one, once per episode (the level sent is
kept on the endpoint), with a recovery message when no pair fires any more.
Each change is recorded once (an AlertEvent) and sent to the endpoint's notification
channels, a delivery row each, retried as rows (scans/notify/channels/): email to the team's owners
and admins, signed webhooks, chat and paging services through Apprise, all outbound through
the site's guard. The tasks of before channels keep their scans.tasks.* names here.

This runs after every stored scan, so most scans read little: the last few scans' down flags
(their states only when one was down), and the SLO windows only while a burn alert is sent or a
recent scan missed a target (_burn_quiet).
"""

from __future__ import annotations

import logging
import math
from datetime import timedelta

from celery import shared_task
from django.conf import settings
from django.core.cache import cache
from django.utils import timezone

from scans import maintenance
from scans.grader import is_below_floor
from scans.history import slo_windows, state
from scans.history.slo_wording import WindowWords, rate_text, span_text
from scans.models import CapacityOutcome, Endpoint, EndpointMode, Scan, ScanStatus
from scans.models.status_pages import incident_news
from scans.notify import incidents
from scans.notify.channels import delivery
from scans.system_wide import ALL_ENDPOINTS

log = logging.getLogger(__name__)

# How many recent finished scans _down_change looks through for this scan and the one before.
DOWN_LOOKBACK = 20


def _flip(endpoint: Endpoint, field: str, new: bool) -> bool:
    """Set the alert state; True only for the one caller that changed it."""
    won = Endpoint.objects.for_team(endpoint.team_id).filter(pk=endpoint.pk, **{field: not new}).update(
        **{field: new}
    )
    return bool(won)


def _floor_confirmed(endpoint: Endpoint, below: bool) -> bool:
    """The endpoint's last `confirm_after` succeeded scans all say the same of the floor (all
    below it, or all meeting it): one scan with a lost request does not flip the alert."""
    grades = list(Scan.objects.for_team(endpoint.team_id)
                  .filter(endpoint=endpoint, status=ScanStatus.SUCCEEDED)
                  .order_by("-queued_at", "-pk")
                  .values_list("grade", flat=True)[:endpoint.confirm_after])
    return len(grades) == endpoint.confirm_after and all(
        is_below_floor(grade, endpoint.slo_grade_floor) == below for grade in grades)


def _confirm_soon(endpoint: Endpoint) -> None:
    """A change waits for its confirmation: a scheduled endpoint's next scan comes now (the
    beat's next pass), not at the end of its interval."""
    now = timezone.now()
    Endpoint.objects.for_team(endpoint.team_id).filter(
        pk=endpoint.pk, mode=EndpointMode.SCHEDULED, enabled=True,
        next_scan_at__gt=now).update(next_scan_at=now)


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
    # Only what tells down from not is read (state.py's rule: a succeeded scan whose row says
    # down; an errored one is neither); the state's words only when there is news.
    runs = list(Scan.objects.for_team(endpoint.team_id)
                .filter(endpoint=endpoint, status__in=[ScanStatus.SUCCEEDED, ScanStatus.ERRORED])
                .order_by("-queued_at", "-pk")
                .values_list("public_id", "status", "down", "queued_at", "finished_at")
                [:DOWN_LOOKBACK])
    mine = next((i for i, run in enumerate(runs) if run[0] == scan.public_id), None)
    if mine is None:
        return None
    earlier = runs[mine + 1:]
    now_down = _found_down(runs[mine])
    if not now_down and not any(_found_down(run) for run in earlier):
        return None  # no news, whichever of them a maintenance window held
    # Scans held by a maintenance window are skipped too: after the window, a scan compares
    # with the last one before it (still down afterwards: "down" goes out then).
    held = maintenance.covering_for(endpoint, [(queued, finished)
                                               for *_, queued, finished in earlier])
    before = next((run for run, run_held in zip(earlier, held, strict=True)
                   if run[1] != ScanStatus.ERRORED and not run_held), None)
    was_down = before is not None and _found_down(before)
    if now_down == was_down or (before is None and not now_down):
        return None
    if not cache.add(f"tokvera:down-alert:{scan.public_id}", 1, timeout=7 * 86400):
        return None  # already sent for this scan
    current = state.of_scan(endpoint, scan)
    if now_down:
        return ("down", f"the endpoint is down: {current.cause}")
    return ("down_recovered", f"the endpoint answers again ({current.label})")


def _found_down(run: tuple) -> bool:
    """A run of _down_change's (public_id, status, down, …) found the endpoint down."""
    return run[1] == ScanStatus.SUCCEEDED and bool(run[2])


# --- SLO burn-rate alerts (scans/history/slo_windows.py's BURN_PAIRS; docs/slo_windows.md) ----------------
# The window whose figures an SLO message carries (the dashboard's). The pairs' rates do not
# depend on it: whether one fires is read off the shortest window that holds their spans.
SLO_ALERT_WINDOW_DAYS = 7
BURN_WINDOW_DAYS = math.ceil(max(slo_windows.BURN_SPANS_S) / 86400)
# A pair fires only on bad time within its short span (every threshold is over zero): with no
# alert sent, scans over the longest short span are all that can start one.
LONGEST_SHORT_SPAN = timedelta(seconds=max(pair.short_s for pair in slo_windows.BURN_PAIRS))
SLO_EVENTS = {"page": "slo_breaching", "ticket": "slo_at_risk", "": "slo_recovered"}
_BURN_RANK = {"": 0, "ticket": 1, "page": 2}


def _burn_quiet(endpoint: Endpoint, scan: Scan) -> bool:
    """No burn-rate alert is sent and none can start with this scan: none of the endpoint's
    scans that stand for time in the longest short span missed its grade floor. An endpoint
    with a TTFT or error-rate target is not judged here (its misses are in check rows, which
    the SLO window reads)."""
    if (endpoint.slo_burn_alert or endpoint.slo_ttft_p95_ms is not None
            or endpoint.slo_error_rate is not None):
        return False
    # A scan stands for at most one interval from its start (slo_windows.py).
    since = ((scan.finished_at or timezone.now()) - LONGEST_SHORT_SPAN
             - timedelta(minutes=endpoint.interval_minutes))
    grades = (Scan.objects.for_team(endpoint.team_id)
              .filter(endpoint=endpoint, status=ScanStatus.SUCCEEDED, queued_at__gt=since)
              .order_by().values_list("grade", flat=True).distinct())
    return not any(is_below_floor(grade, endpoint.slo_grade_floor) for grade in grades)


def _slo_burn_change(endpoint: Endpoint, scan: Scan) -> tuple[str, str] | None:
    """("slo_breaching", detail) when a fast burn-rate pair starts firing, ("slo_at_risk", …)
    when only a slow one does, ("slo_recovered", …) when no pair's two rates reach its
    threshold any more after one fired.
    Once per episode: a calmer level while still burning (page → ticket) sends nothing, and a
    conditional UPDATE of Endpoint.slo_burn_alert lets one caller send each change."""
    if _burn_quiet(endpoint, scan):
        return None
    burning = slo_windows.window(endpoint, BURN_WINDOW_DAYS, now=scan.finished_at)
    level, sent = burning.alert_level, endpoint.slo_burn_alert
    if level == sent or (level and _BURN_RANK[level] < _BURN_RANK[sent]):
        return None
    if sent and not level and burning.still_burning:
        return None  # the episode goes on: a recovery only when no pair's rates reach it
    won = Endpoint.objects.for_team(endpoint.team_id).filter(
        pk=endpoint.pk, slo_burn_alert=sent).update(slo_burn_alert=level)
    if not won:
        return None  # another scan's alert got there first
    current = slo_windows.window(endpoint, SLO_ALERT_WINDOW_DAYS, now=scan.finished_at)
    measured = (f"{current.share:.1%} of the covered time of the last {current.days} days "
                f"was good (objective {current.objective:.1%})" if current.enough else
                WindowWords(current).empty_message)
    if level:
        pair = next(w for w in WindowWords(current).alert_windows
                    if w["firing"] and w["level"] == level)
        return (SLO_EVENTS[level],
                f"the SLO's error budget burns at {rate_text(pair['long_rate'])} over the "
                f"last {span_text(pair['long_s'])} and "
                f"{rate_text(pair['short_rate'])} over the last "
                f"{span_text(pair['short_s'])} ({level} at {pair['threshold']:g}× or more); "
                f"{measured}")
    return ("slo_recovered", f"no burn-rate alert fires any more; {measured}")


def slo_message(endpoint: Endpoint, scan: Scan) -> dict:
    """The SLO figures an SLO alert carries, as of the scan that raised it."""
    current = slo_windows.window(endpoint, SLO_ALERT_WINDOW_DAYS, now=scan.finished_at)
    words = WindowWords(current)
    return {
        "status": current.status, "reason": words.status_reason,
        "window_days": current.days, "objective": current.objective,
        "good_share_of_covered": current.share, "covered_s": current.covered_s,
        "burn_rates": [{"span": b["span"], "span_s": b["span_s"], "rate": b["rate"],
                        "covered_s": b["covered_s"]} for b in words.burn],
        "firing": [{"level": w["level"], "windows": w["label"], "threshold": w["threshold"]}
                   for w in words.alert_windows if w["firing"]],
        "url": f"{settings.SITE_URL}/endpoints/{endpoint.public_id}/#slo",
    }


# --- capacity within the SLO ------------------------------------------------------
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
    # Read again (its alert states may have just changed), within the scan's own team; the
    # team's row only when a message names it.
    endpoint = Endpoint.objects.for_team(scan.endpoint.team_id).get(pk=scan.endpoint_id)
    if maintenance.in_maintenance(endpoint, scan.queued_at, scan.finished_at):
        # A maintenance window holds every alert: nothing flips, so the first scan after the
        # window sends whatever still holds then (scans/maintenance.py).
        return
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
        # A down scan's F is no grade: where probes tell of down, it leaves the floor alone.
        floor_news = not (endpoint.liveness and scan.down) and below != endpoint.below_floor
        if floor_news and not _floor_confirmed(endpoint, below):
            floor_news = False
            _confirm_soon(endpoint)
        if floor_news and _flip(endpoint, "below_floor", below):
            if below:
                events.append(("below_floor", f"grade {scan.grade} is below the floor "
                                              f"{endpoint.slo_grade_floor}"))
            else:
                events.append(("floor_recovered", f"grade {scan.grade} meets the floor "
                                                  f"{endpoint.slo_grade_floor} again"))
        # Once probes have a verdict, "down" and "up again" are theirs (scans/liveness/):
        # confirmed and sooner; a scan's own down news would say it a second time.
        change = None if endpoint.liveness else _down_change(endpoint, scan)
        if change is not None:
            # One message for one piece of news: "down" says more than "below floor" (a down
            # endpoint grades F), and "up again" more than "floor recovered".
            same_news = {"down": "below_floor", "down_recovered": "floor_recovered"}[change[0]]
            if any(kind == "floor_recovered" for kind, _ in events if kind == same_news):
                # Its message is folded into "up again"; its incident's problem still ends.
                incidents.end_problems(endpoint, scan.finished_at or timezone.now(),
                                       "meets its grade floor again", troubles=("floor",))
            events = [e for e in events if e[0] != same_news] + [change]
        if (burn := _slo_burn_change(endpoint, scan)) is not None:
            events.append(burn)
        if (capacity := _capacity_change(endpoint, scan)) is not None:
            events.append(capacity)
    for kind, detail in events:
        # One event, a delivery row per channel (retried as rows, scans/notify/channels/delivery.py),
        # so a mail server or webhook hiccup never loses the one message this change gets.
        delivery.record(endpoint, scan, kind, payload(endpoint, scan, kind, detail))
    # The public page's subscribers hear of an incident starting and ending (never raises).
    incident_news.send_robust(Endpoint, endpoint=endpoint, kinds=[k for k, _ in events], at=scan.queued_at)


def payload(endpoint: Endpoint, scan: Scan, kind: str, detail: str) -> dict:
    # What the scan says about the endpoint: "down" with "connection refused", not only a grade.
    current = state.of_scan(endpoint, scan)
    return {
        "event": kind,
        "detail": detail,
        "state": current.state,
        "cause": current.cause,
        "endpoint": {"id": str(endpoint.public_id), "name": endpoint.name},
        "team": endpoint.team.name,
        "scan": {"id": str(scan.public_id), "status": scan.status, "grade": scan.grade or None,
                 "scoring_version": scan.scoring_version or None},
        "url": f"{settings.SITE_URL}/scans/{scan.public_id}/",
        **({"slo": slo_message(endpoint, scan)} if kind in SLO_EVENTS.values() else {}),
        **({"capacity": capacity_message(scan)} if kind in CAPACITY_EVENTS else {}),
    }


# --- delivery tasks of before channels (names kept, so messages still queued find them) ------


@shared_task(name="scans.tasks.send_alert")
def send_alert(endpoint_id: int, scan_id: int, kind: str, detail: str) -> None:
    """An alert queued before channels: recorded now, and delivered to the endpoint's channels."""
    # Task step: the ids came from our own alert code; the endpoint names the team.
    endpoint = ALL_ENDPOINTS.select_related("team").filter(pk=endpoint_id).first()
    scan = None if endpoint is None else Scan.objects.for_team(endpoint.team_id).filter(pk=scan_id).first()
    if endpoint is None or scan is None:
        return  # deleted since: nobody is left to tell
    delivery.record(endpoint, scan, kind, payload(endpoint, scan, kind, detail))


@shared_task(name="scans.tasks.send_webhook")
def send_webhook(endpoint_id: int, message: dict) -> None:
    """A webhook queued before channels: its alert was recorded for the endpoint's channels by
    send_alert, which queued it, so there is nothing left to send."""
    log.info("an old send_webhook message for endpoint %s was dropped (channels deliver it)",
             endpoint_id)
