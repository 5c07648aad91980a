"""Incidents: what a team's confirmed alerts add up to, and what people say about it.

Every alert the site records passes `on_alert` in the same transaction (the one place alerts
are written: scans/notify/channels/delivery.py). A confirmed problem ("down", "below_floor",
"slo_breaching": already confirmed by the alert rules, so a single bad result never opens one)
becomes a problem of an incident: of the team's open automatic incident when that one's newest
problem started within GROUP_WINDOW (endpoints that fail together are one incident), else of a
new one. Its recovery ends the problem; when the last problem of an automatic incident ends,
the incident is resolved. Every other alert of an endpoint in an open incident (a reminder, a
capacity drop) is a line of its timeline.

People acknowledge an incident (which stops the "still down" reminders of its endpoints), post
updates (investigating → identified → monitoring → resolved, with words that the team's public
status pages show when marked public), resolve it by hand, and write its postmortem; a manual
incident is one a person opened for a problem no check sees. Each is a timeline line naming who
(the user, or the API token), and each change is in the audit log.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime, timedelta
from functools import partial

from django.contrib.auth.models import AbstractBaseUser
from django.db import connection, transaction
from django.db.models.signals import pre_delete
from django.dispatch import receiver
from django.utils import timezone

from accounts.models import Team
from audit import record as audit
from scans.models import (
    AlertEvent,
    Endpoint,
    Incident,
    IncidentProblem,
    IncidentStatus,
    IncidentUpdate,
    TimelineKind,
)
from scans.models.endpoints import endpoint_moved
from scans.models.incidents import public_update_posted

log = logging.getLogger(__name__)

__all__ = [
    "GROUP_WINDOW",
    "OPENERS",
    "IncidentError",
    "acknowledge",
    "acknowledged_down",
    "end_problems",
    "on_alert",
    "open_manual",
    "post_update",
    "resolve",
    "set_postmortem",
]

#: The first key of the advisory lock a team's incident writers take (the team id is the second).
LOCK_NAMESPACE = 7_340_101
#: A confirmed problem joins the team's open incident whose newest problem began this recently.
GROUP_WINDOW = timedelta(minutes=15)
#: The alerts that open a problem, by its trouble (the key channels' incident keys use too). A
#: ticket-level SLO burn ("slo_at_risk") and a minority of locations ("unreachable_from") stay
#: alerts: they are worth a look, not an incident.
OPENERS = {"down": "down", "below_floor": "floor", "slo_breaching": "slo"}
#: The alerts that end a problem, by the trouble they end.
ENDERS = {"down_recovered": "down", "floor_recovered": "floor", "slo_recovered": "slo"}
#: What an incident's title says of each trouble.
WORDS = {"down": "down", "floor": "below the grade floor",
         "slo": "burning the SLO's error budget"}


def _actor(user: AbstractBaseUser | None) -> tuple[str, int | None]:
    """Who is acting: the request's user or API token (as the audit log names them)."""
    actor = audit.actor_of(audit.current_request.get(), user)
    return actor.label, actor.user_id


def _line(incident: Incident, kind: str, at: datetime, *, text: str = "", status: str = "",
          public: bool = False, user: AbstractBaseUser | None = None,
          alert: AlertEvent | None = None, by: str | None = None) -> IncidentUpdate:
    label, user_id = _actor(user) if by is None else (by, None)
    line = IncidentUpdate.objects.for_team(incident.team_id).create(
        incident=incident, kind=kind, at=at, text=text,
        status=status, public=public, by=label, by_user_id=user_id, alert=alert)
    if public:
        transaction.on_commit(partial(public_update_posted.send_robust, IncidentUpdate,
                                      update=line))
    return line


def _title(incident: Incident) -> str:
    """'<endpoint> is down' for one endpoint; '3 endpoints: down, below the grade floor' for
    several."""
    problems = list(IncidentProblem.objects.for_team(incident.team_id)
                    .filter(incident=incident).select_related("endpoint"))
    names = sorted({p.endpoint.name for p in problems})
    words = [WORDS.get(t, t) for t in dict.fromkeys(p.trouble for p in problems)]
    if len(names) == 1:
        return f"{names[0]} is {' and '.join(words)}"[:200]
    return f"{len(names)} endpoints: {', '.join(words)}"[:200]


# --- from the alert path -----------------------------------------------------------------------


def _lock_team(team_id: int) -> None:
    """One writer of a team's incidents at a time (to the end of the transaction): two
    endpoints failing together in two workers make one incident, and a person's resolve and
    the last recovery close it once. Its own advisory lock, not the team's row: an apply that
    holds the row for a while must not hold up the alerts."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [LOCK_NAMESPACE, team_id])


def on_alert(event: AlertEvent, at: datetime | None = None) -> None:
    """Open, join, extend or end an incident for one recorded alert, in its transaction but in
    a savepoint of its own: a failure here is logged and never costs the alert."""
    if event.endpoint_id is None or event.kind == "test":
        return
    try:
        with transaction.atomic():
            _on_alert(event, at)
    except Exception:  # noqa: BLE001 - the alert goes out whatever the incident bookkeeping says
        log.exception("incident not updated for alert %s", event.pk)


def _on_alert(event: AlertEvent, at: datetime | None) -> None:
    at = at or (event.scan.finished_at if event.scan_id and event.scan else None) or timezone.now()
    endpoint = event.endpoint
    assert endpoint is not None
    _lock_team(endpoint.team_id)
    problems = IncidentProblem.objects.for_team(endpoint.team_id).filter(endpoint=endpoint)
    if event.kind in OPENERS:
        _open_problem(event, endpoint, at, problems)
    elif event.kind in ENDERS:
        _end_problem(endpoint, at, problems.filter(trouble=ENDERS[event.kind],
                                                    ended_at__isnull=True).first(),
                     text=_alert_text(event), alert=event)
    else:
        problem = problems.filter(ended_at__isnull=True).select_related("incident").first()
        if problem is not None:  # a reminder or other news of an endpoint in trouble
            _line(problem.incident, TimelineKind.ALERT, at, text=_alert_text(event),
                  alert=event, by="system")


def end_problems(endpoint: Endpoint, at: datetime, why: str,
                 troubles: tuple[str, ...] | None = None) -> None:
    """End the endpoint's active problems (all, or those of `troubles`) without an alert: its
    alert state was reset (another server, the endpoint deleted) or a recovery's message was
    folded into another. An incident left with no active problem is resolved."""
    with transaction.atomic():
        _lock_team(endpoint.team_id)
        active = IncidentProblem.objects.for_team(endpoint.team_id).filter(
            endpoint=endpoint, ended_at__isnull=True).select_related("incident")
        if troubles is not None:
            active = active.filter(trouble__in=troubles)
        for problem in active:
            _end_problem(endpoint, at, problem, text=f"{endpoint.name}: {why}")


def _alert_text(event: AlertEvent) -> str:
    return f"{event.endpoint.name if event.endpoint else ''}: {event.message.get('detail', '')}"


def _open_problem(event: AlertEvent, endpoint: Endpoint, at: datetime, problems) -> None:
    trouble = OPENERS[event.kind]
    if problems.filter(trouble=trouble, ended_at__isnull=True).exists():
        return  # already an active problem of an incident
    incidents = Incident.objects.for_team(endpoint.team_id)
    incident = (incidents.filter(manual=False, resolved_at__isnull=True,
                                 last_problem_at__gte=at - GROUP_WINDOW)
                .order_by("-last_problem_at").first())
    if incident is None:
        incident = incidents.create(team_id=endpoint.team_id, title=endpoint.name,
                                    opened_at=at, last_problem_at=at)
        _line(incident, TimelineKind.OPENED, at, text=_alert_text(event), alert=event,
              by="system")
    else:
        incidents.filter(pk=incident.pk).update(last_problem_at=max(at, incident.last_problem_at))
        _line(incident, TimelineKind.ALERT, at, text=_alert_text(event), alert=event, by="system")
    IncidentProblem.objects.for_team(endpoint.team_id).create(
        incident=incident, endpoint=endpoint, trouble=trouble, started_at=at)
    incident.endpoints.add(endpoint)
    incidents.filter(pk=incident.pk).update(title=_title(incident))


def _end_problem(endpoint: Endpoint, at: datetime, problem: IncidentProblem | None, *,
                 text: str, alert: AlertEvent | None = None) -> None:
    if problem is None:
        return  # its incident was resolved by hand, or it began before incidents existed
    IncidentProblem.objects.for_team(endpoint.team_id).filter(pk=problem.pk).update(ended_at=at)
    incident = problem.incident
    _line(incident, TimelineKind.ALERT, at, text=text, alert=alert, by="system")
    still = IncidentProblem.objects.for_team(endpoint.team_id).filter(
        incident=incident, ended_at__isnull=True).exists()
    if not still and not incident.manual:
        _close(incident, at, text="every problem recovered", by="system")


def acknowledged_down(endpoint: Endpoint) -> bool:
    """The endpoint is down in an incident somebody acknowledged: no "still down" reminder."""
    return IncidentProblem.objects.for_team(endpoint.team_id).filter(
        endpoint=endpoint, trouble="down", ended_at__isnull=True,
        incident__acknowledged_at__isnull=False, incident__resolved_at__isnull=True).exists()


# --- from people (pages and the API) -------------------------------------------------------------


class IncidentError(ValueError):
    """A change the incident's state does not allow; the message says why."""


def acknowledge(incident: Incident, user: AbstractBaseUser | None = None) -> bool:
    """Acknowledge an open incident once; False when it was already (or is resolved)."""
    now = timezone.now()
    label, _ = _actor(user)
    with audit.track(incident, user=user):
        won = Incident.objects.for_team(incident.team_id).filter(
            pk=incident.pk, acknowledged_at__isnull=True, resolved_at__isnull=True).update(
            acknowledged_at=now, acknowledged_by=label)
        if won:
            _line(incident, TimelineKind.ACKNOWLEDGED, now, user=user,
                  text="acknowledged: reminders of its endpoints stop")
    return bool(won)


def post_update(incident: Incident, status: str, text: str, *, public: bool,
                user: AbstractBaseUser | None = None) -> IncidentUpdate:
    """A person's update: a status (resolved closes the incident) and words."""
    if status not in IncidentStatus.values:
        raise IncidentError(f"unknown status {status!r}: one of {', '.join(IncidentStatus.values)}")
    if status == IncidentStatus.RESOLVED:
        return resolve(incident, text=text, public=public, user=user)
    now = timezone.now()
    with audit.track(incident, user=user):
        _lock_team(incident.team_id)
        if not Incident.objects.for_team(incident.team_id).filter(
                pk=incident.pk, resolved_at__isnull=True).update(status=status):
            raise IncidentError("the incident is resolved: write its postmortem instead")
        return _line(incident, TimelineKind.UPDATE, now, text=text, status=status,
                     public=public, user=user)


def resolve(incident: Incident, *, text: str = "", public: bool = False,
            user: AbstractBaseUser | None = None) -> IncidentUpdate:
    """Resolve by hand: problems still active end here (a later recovery changes nothing)."""
    with audit.track(incident, user=user):
        _lock_team(incident.team_id)
        closed = _close(incident, timezone.now(), text=text or "resolved", public=public,
                        user=user)
        if closed is None:
            raise IncidentError("the incident is already resolved")
        return closed


def _close(incident: Incident, at: datetime, *, text: str, public: bool = False,
           user: AbstractBaseUser | None = None, by: str | None = None) -> IncidentUpdate | None:
    """Resolve the incident once (None when it already was), ending its active problems."""
    with transaction.atomic():
        if not Incident.objects.for_team(incident.team_id).filter(
                pk=incident.pk, resolved_at__isnull=True).update(
                resolved_at=at, status=IncidentStatus.RESOLVED):
            return None
        IncidentProblem.objects.for_team(incident.team_id).filter(
            incident=incident, ended_at__isnull=True).update(ended_at=at)
        incident.resolved_at, incident.status = at, IncidentStatus.RESOLVED
        return _line(incident, TimelineKind.RESOLVED, at, text=text,
                     status=IncidentStatus.RESOLVED, public=public, user=user, by=by)


def set_postmortem(incident: Incident, text: str, user: AbstractBaseUser | None = None) -> None:
    """Write (or rewrite) a resolved incident's postmortem."""
    if incident.resolved_at is None:
        raise IncidentError("resolve the incident before writing its postmortem")
    with audit.track(incident, user=user):
        Incident.objects.for_team(incident.team_id).filter(pk=incident.pk).update(postmortem=text)
        _line(incident, TimelineKind.POSTMORTEM, timezone.now(), user=user,
              text="postmortem written" if not incident.postmortem else "postmortem edited")
    incident.postmortem = text


def open_manual(team: Team, title: str, endpoints: Iterable[Endpoint], *, status: str,
                text: str, public: bool, user: AbstractBaseUser | None = None) -> Incident:
    """A problem a person declares (nothing the checks see): open until resolved by hand."""
    if status not in IncidentStatus.values or status == IncidentStatus.RESOLVED:
        raise IncidentError("a new incident is investigating, identified or monitoring")
    now = timezone.now()
    incident = Incident(team=team, title=title, status=status, manual=True, opened_at=now,
                        last_problem_at=now)
    with audit.track(incident, user=user):
        incident.save()
        incident.endpoints.set(list(endpoints))
        _line(incident, TimelineKind.OPENED, now, text=text, status=status, public=public,
              user=user)
    return incident


@receiver(pre_delete, sender=Endpoint)
def _endpoint_deleted(sender: object, instance: Endpoint, origin: object = None,
                      **_: object) -> None:
    """An endpoint deleted (its page, the API, an apply's --prune): its problems end before
    they go with it, so no incident waits for a recovery that cannot come. Not when its team
    is deleted: the incidents go too."""
    if isinstance(origin, Team) or getattr(origin, "model", None) is Team:
        return
    end_problems(instance, timezone.now(), "the endpoint was deleted")


@receiver(endpoint_moved)
def _endpoint_moved(sender: object, endpoint: Endpoint, at: datetime, **_: object) -> None:
    end_problems(endpoint, at, "moved to another server: its problems there end here")
