"""A batch of probe results from one location: stored, confirmed, and turned into alerts.

In one transaction per batch: each result as a ProbeResult row, its hour added to ProbeHour
(an upsert that adds counts and sums), and the location's standing (LivenessState) moved on:
a failed counted probe extends the failure run, a good one the success run; the location is
confirmed down after `confirm_after` failures in a row and up again after as many successes.
A result that says nothing about the endpoint (the guard refused its address, the probe failed
on our side) is stored but counted in no run.

After the commit, every endpoint whose location changed its verdict (or that had none) gets
the quorum across its locations (verdict.py); a change of Endpoint.liveness is a conditional
UPDATE, so one caller sends each alert: "down", "down_recovered" (and a graded scan soon
after), "unreachable_from" and its recovery for a minority of locations, and "still_down"
every `renotify_minutes` while down, when the team asked for it. A maintenance window holds
every change (nothing flips), as it holds the scans' alerts.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from scans import maintenance
from scans.endpoints import scheduling
from scans.grader import PROBE_OUR_SIDE, LivenessResult
from scans.history import state as endpoint_state
from scans.history.slo_wording import duration_text
from scans.liveness import partitions, verdict
from scans.models import Endpoint, LivenessState, ProbeResult
from scans.models.status_pages import incident_news
from scans.notify import incidents
from scans.notify.channels import delivery

log = logging.getLogger(__name__)

__all__ = ["Probed", "evaluate", "record"]

#: The news a change of the quorum's verdict is, by (old, new); no entry: no news.
NEWS = {
    (verdict.UNKNOWN, verdict.DOWN): "down",
    (verdict.UP, verdict.DOWN): "down",
    (verdict.DEGRADED, verdict.DOWN): "down",
    (verdict.DOWN, verdict.UP): "down_recovered",
    (verdict.DOWN, verdict.DEGRADED): "down_recovered",
    (verdict.UNKNOWN, verdict.DEGRADED): "unreachable_from",
    (verdict.UP, verdict.DEGRADED): "unreachable_from",
    (verdict.DEGRADED, verdict.UP): "unreachable_from_recovered",
}
STILL_DOWN = "still_down"


@dataclass(frozen=True)
class Probed:
    """One endpoint's probe result, as the task took it."""

    endpoint_id: int
    interval_s: int
    confirm_after: int
    at: datetime
    result: LivenessResult


def record(location: str, batch: Sequence[Probed]) -> list[int]:
    """Store a batch of one location's results; return the endpoints evaluated again."""
    if not batch:
        return []
    partitions.ensure_probe_days(p.at for p in batch)  # a day the beat has not created yet
    with transaction.atomic():
        _store_results(location, batch)
        _add_hours(location, batch)
        changed = _move_standings(location, batch)
    ids = [p.endpoint_id for p in batch]
    # Those whose news a maintenance window held are judged again after it.
    held = Endpoint.dangerously_unscoped.filter(pk__in=ids, liveness_held=True)  # this batch's
    changed += [pk for pk in held.values_list("pk", flat=True) if pk not in changed]
    for endpoint_id in changed:
        evaluate(endpoint_id)
    _renotify([pk for pk in ids if pk not in changed])
    return changed


def _counted(result: LivenessResult) -> bool:
    return result.kind not in PROBE_OUR_SIDE


def _store_results(location: str, batch: Sequence[Probed]) -> None:
    # A batch spans teams: written system-wide, each row under its endpoint's team.
    ProbeResult.dangerously_unscoped.bulk_create([
        ProbeResult(endpoint_id=p.endpoint_id, location=location, at=p.at, ok=p.result.ok,
                    counted=_counted(p.result), status_code=p.result.status_code,
                    ttft_ms=p.result.ttft_ms, kind=p.result.kind[:24],
                    cause=p.result.cause[:300])
        for p in batch])


def _add_hours(location: str, batch: Sequence[Probed]) -> None:
    """Each result added to its hour's counts and sums (one upsert per batch)."""
    rows = []
    for p in batch:
        counted = _counted(p.result)
        ttft = p.result.ttft_ms
        rows.append((p.endpoint_id, location, p.at.replace(minute=0, second=0, microsecond=0),
                     1, int(counted and not p.result.ok), float(p.interval_s if counted else 0),
                     float(p.interval_s if counted and not p.result.ok else 0),
                     ttft or 0.0, int(ttft is not None), ttft, ttft))
    # Typed: a column of NULLs alone (no probe answered) would be read as text.
    one = ("(%s::bigint, %s::varchar, %s::timestamptz, %s::int, %s::int, %s::float8, "
           "%s::float8, %s::float8, %s::int, %s::float8, %s::float8)")
    placeholders = ", ".join([one] * len(rows))
    table = "scans_probehour"
    sql = f"""
        INSERT INTO {table} (endpoint_id, location, hour, probes, failed, covered_s, down_s,
                             ttft_sum, ttft_n, ttft_min, ttft_max)
        SELECT endpoint_id, location, hour, SUM(probes), SUM(failed), SUM(covered_s),
               SUM(down_s), SUM(ttft_sum), SUM(ttft_n), MIN(ttft_min), MAX(ttft_max)
        FROM (VALUES {placeholders}) AS v (endpoint_id, location, hour, probes, failed,
                                           covered_s, down_s, ttft_sum, ttft_n, ttft_min,
                                           ttft_max)
        GROUP BY endpoint_id, location, hour
        ON CONFLICT (endpoint_id, hour, location) DO UPDATE SET
            probes = {table}.probes + EXCLUDED.probes,
            failed = {table}.failed + EXCLUDED.failed,
            covered_s = {table}.covered_s + EXCLUDED.covered_s,
            down_s = {table}.down_s + EXCLUDED.down_s,
            ttft_sum = {table}.ttft_sum + EXCLUDED.ttft_sum,
            ttft_n = {table}.ttft_n + EXCLUDED.ttft_n,
            ttft_min = LEAST({table}.ttft_min, EXCLUDED.ttft_min),
            ttft_max = GREATEST({table}.ttft_max, EXCLUDED.ttft_max)
    """  # noqa: S608 - fixed SQL; every value is a parameter
    with connection.cursor() as cursor:
        cursor.execute(sql, [value for row in rows for value in row])


def _move_standings(location: str, batch: Sequence[Probed]) -> list[int]:
    """Each endpoint's standing at this location moved on by its result; the endpoints whose
    confirmed verdict changed (or that reported for the first time)."""
    ids = [p.endpoint_id for p in batch]
    states = LivenessState.dangerously_unscoped  # a batch spans teams
    existing = {s.endpoint_id: s for s in states.select_for_update().filter(
        endpoint_id__in=ids, location=location)}
    changed, new = [], []
    for p in sorted(batch, key=lambda p: p.at):
        standing = existing.get(p.endpoint_id)
        if standing is None:
            standing = LivenessState(endpoint_id=p.endpoint_id, location=location)
            existing[p.endpoint_id] = standing
            new.append(standing)
        standing.last_at, standing.last_ok = p.at, p.result.ok
        standing.last_ttft_ms = p.result.ttft_ms
        if not p.result.ok:  # the latest failure's cause, kept while good probes confirm
            standing.last_cause = p.result.cause[:300]
        if not _counted(p.result):
            continue
        before = (standing.down, standing.since is not None)
        if p.result.ok:
            if standing.successes == 0:
                standing.streak_since = p.at
            standing.successes, standing.failures = standing.successes + 1, 0
            if standing.since is None or (standing.down
                                          and standing.successes >= p.confirm_after):
                standing.down, standing.since = False, standing.streak_since
        else:
            if standing.failures == 0:
                standing.streak_since = p.at
            standing.failures, standing.successes = standing.failures + 1, 0
            if not standing.down and standing.failures >= p.confirm_after:
                standing.down, standing.since = True, standing.streak_since
        if (standing.down, standing.since is not None) != before:
            changed.append(p.endpoint_id)
    states.bulk_create(new)
    created = {id(s) for s in new}  # a set: a list lookup per row would compare every row
    _update_standings([s for s in existing.values() if id(s) not in created])
    return list(dict.fromkeys(changed))


def _update_standings(rows: list[LivenessState]) -> None:
    """One UPDATE … FROM (VALUES …) for the batch (Django's bulk_update builds a CASE per field
    and row, which costs more CPU than the probes themselves)."""
    if not rows:
        return
    one = ("(%s::bigint, %s::int, %s::int, %s::boolean, %s::timestamptz, %s::timestamptz, "
           "%s::timestamptz, %s::boolean, %s::float8, %s::varchar)")
    sql = f"""
        UPDATE scans_livenessstate AS s SET failures = v.failures, successes = v.successes,
            down = v.down, since = v.since, streak_since = v.streak_since, last_at = v.last_at,
            last_ok = v.last_ok, last_ttft_ms = v.last_ttft_ms, last_cause = v.last_cause
        FROM (VALUES {", ".join([one] * len(rows))}) AS v (id, failures, successes, down, since,
            streak_since, last_at, last_ok, last_ttft_ms, last_cause)
        WHERE s.id = v.id
    """  # noqa: S608 - fixed SQL; every value is a parameter
    values = [value for s in rows for value in (
        s.pk, s.failures, s.successes, s.down, s.since, s.streak_since, s.last_at, s.last_ok,
        s.last_ttft_ms, s.last_cause)]
    with connection.cursor() as cursor:
        cursor.execute(sql, values)




def evaluate(endpoint_id: int, now: datetime | None = None) -> str | None:
    """The quorum for one endpoint, its change recorded and alerted once; the news sent."""
    now = now or timezone.now()
    # Under the endpoint's row lock: two locations' batches that commit at once must judge one
    # after the other, or the later, truer verdict could lose to the earlier one for good.
    with transaction.atomic():
        return _evaluate_locked(endpoint_id, now)


def _evaluate_locked(endpoint_id: int, now: datetime) -> str | None:
    # Task step: the id came from our own batch; the endpoint names its team.
    endpoint = (Endpoint.dangerously_unscoped.select_for_update(of=("self",))
                .select_related("team").filter(pk=endpoint_id).first())
    if endpoint is None:
        return None  # deleted meanwhile
    rows = list(LivenessState.objects.for_team(endpoint.team_id).filter(endpoint=endpoint))
    found = verdict.quorum(scheduling.locations_of(endpoint), [
        verdict.Standing(s.location, s.since is not None, s.down, s.last_cause) for s in rows])
    old = endpoint.liveness
    if found.state == old and found.cause == endpoint.liveness_cause:
        if endpoint.liveness_held:
            Endpoint.objects.for_team(endpoint.team_id).filter(pk=endpoint.pk).update(
                liveness_held=False)  # what was held no longer holds
        return None
    if found.state != old and maintenance.in_maintenance(endpoint, now):
        # Held: the first result after the window sends what still holds then.
        Endpoint.objects.for_team(endpoint.team_id).filter(pk=endpoint.pk).update(
            liveness_held=True)
        return None
    since = _verdict_since(rows, found) or now
    won = Endpoint.objects.for_team(endpoint.team_id).filter(
        pk=endpoint.pk, liveness=old, liveness_cause=endpoint.liveness_cause).update(
        liveness=found.state, liveness_cause=found.cause[:400], liveness_held=False,
        **({"liveness_since": since, "liveness_notified_at": now}
           if found.state != old else {}))
    if not won or found.state == old:
        return None  # another batch got there first, or only the cause's words moved
    news = NEWS.get((old, found.state))
    if news == "down_recovered":
        # Answering again: a graded scan soon says how well (the next beat sends it).
        Endpoint.objects.for_team(endpoint.team_id).filter(
            pk=endpoint.pk, next_scan_at__gt=now).update(next_scan_at=now)
    if news is not None:
        endpoint.liveness, endpoint.liveness_cause, endpoint.liveness_since = (
            found.state, found.cause, since)
        _send(endpoint, news, found, now)
        # The public page's subscribers hear of an incident starting and ending (never raises).
        incident_news.send_robust(Endpoint, endpoint=endpoint, kinds=[news], at=since)
    return news


def _verdict_since(rows: list[LivenessState], found: verdict.Verdict) -> datetime | None:
    """When the new verdict began: the first probe of the last run that completed it (the
    location that made the majority, or the last to recover)."""
    if found.state in (verdict.DOWN, verdict.DEGRADED):
        rows = [s for s in rows if s.location in found.down_at]
    return max((s.since for s in rows if s.since is not None), default=None)


def _renotify(endpoint_ids: list[int], now: datetime | None = None) -> None:
    """"still down" to endpoints down longer than their renotify_minutes since the last
    message (a conditional UPDATE of liveness_notified_at: once per period)."""
    now = now or timezone.now()
    due = (Endpoint.dangerously_unscoped  # the batch's endpoints, every team's
           .filter(pk__in=endpoint_ids, liveness=verdict.DOWN, renotify_minutes__isnull=False)
           .select_related("team"))
    for endpoint in due:
        last = endpoint.liveness_notified_at
        if last is not None and last + timedelta(minutes=endpoint.renotify_minutes or 0) > now:
            continue
        if maintenance.in_maintenance(endpoint, now) or incidents.acknowledged_down(endpoint):
            continue  # held by a window, or somebody acknowledged its incident
        won = Endpoint.objects.for_team(endpoint.team_id).filter(
            pk=endpoint.pk, liveness_notified_at=last).update(liveness_notified_at=now)
        if won:
            found = verdict.Verdict(verdict.DOWN, (), endpoint.liveness_cause)
            _send(endpoint, STILL_DOWN, found, now)


def _send(endpoint: Endpoint, news: str, found: verdict.Verdict, now: datetime) -> None:
    # A change dates from the probe that began it (an incident's start); a reminder from now.
    at = now if news == STILL_DOWN else endpoint.liveness_since or now
    delivery.record_probe_alert(endpoint, news, payload(endpoint, news, found, now), at=at)


def _detail(endpoint: Endpoint, news: str, found: verdict.Verdict, now: datetime) -> str:
    confirm = endpoint.confirm_after
    runs = f"{confirm} probe{'s' * (confirm != 1)} in a row"
    if news == "down":
        return f"the endpoint is down ({runs} failed): {found.cause}"
    if news == STILL_DOWN:
        lasted = (duration_text((now - endpoint.liveness_since).total_seconds())
                  if endpoint.liveness_since else "a while")
        return f"the endpoint is still down, for {lasted}: {found.cause}"
    if news == "unreachable_from":
        return f"the endpoint is {found.cause} ({runs} failed there)"
    if news == "unreachable_from_recovered":
        return f"the endpoint answers from every location again ({runs} answered)"
    return f"the endpoint answers again ({runs} answered); a graded scan follows"


def payload(endpoint: Endpoint, news: str, found: verdict.Verdict, now: datetime) -> dict:
    """What a probe alert carries: the news, the state and its cause, where it was seen from,
    and the endpoint's page (there is no scan to link)."""
    per_location = [
        {"location": s.location, "down": s.down, "last_at": s.last_at.isoformat()
         if s.last_at else None, "last_ok": s.last_ok, "last_ttft_ms": s.last_ttft_ms,
         "cause": s.last_cause}
        for s in LivenessState.objects.for_team(endpoint.team_id).filter(endpoint=endpoint)
        .order_by("location")]
    return {
        "event": news,
        "detail": _detail(endpoint, news, found, now),
        "state": {verdict.UP: endpoint_state.UP, verdict.DOWN: endpoint_state.DOWN,
                  verdict.DEGRADED: endpoint_state.DEGRADED}.get(found.state,
                                                                 endpoint_state.NOT_SCANNED),
        "cause": found.cause,
        "endpoint": {"id": str(endpoint.public_id), "name": endpoint.name},
        "team": endpoint.team.name,
        "scan": None,
        "probes": {"confirm_after": endpoint.confirm_after, "locations": per_location,
                   "since": endpoint.liveness_since.isoformat()
                   if endpoint.liveness_since else None},
        "url": f"{settings.SITE_URL}/endpoints/{endpoint.public_id}/",
    }
