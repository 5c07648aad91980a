"""What a public status page shows of the team's incidents: only the updates a person marked
public, on the incidents that touch an endpoint the page shows (an incident with no endpoint is
the whole team's: on every page), under the names the page gives those endpoints.

Never an incident's title, an endpoint's own name or an alert's words: those are the team's
wording, not chosen for the public. The page, its feed and its subscribers' mail read this.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Count, Prefetch, Q

from scans.models import Incident, IncidentStatus, IncidentUpdate, StatusPage, StatusPageEndpoint

__all__ = ["PublicIncident", "PublicUpdate", "for_page", "pages_for"]


@dataclass(frozen=True)
class PublicUpdate:
    at: datetime
    status: str  # its label: "Investigating", …, "Resolved"
    text: str


@dataclass(frozen=True)
class PublicIncident:
    incident_id: int
    services: list[str]  # the page's names of the endpoints it touches; [] = every service
    status: str
    resolved_at: datetime | None
    updates: list[PublicUpdate]  # newest first

    @property
    def ongoing(self) -> bool:
        return self.resolved_at is None


def for_page(page: StatusPage, names: dict[int, str], since: datetime) -> list[PublicIncident]:
    """The page's incidents with a public update at or after `since`, newest first; `names`:
    the page's display name of each endpoint it shows, by endpoint id."""
    public = Prefetch("timeline", to_attr="public_updates",
                      queryset=IncidentUpdate.objects.for_team(page.team_id)
                      .filter(public=True).order_by("-at", "-pk"))
    incidents = (Incident.objects.for_team(page.team_id)
                 .annotate(touched=Count("endpoints", filter=Q(endpoints__in=list(names))),
                           all_endpoints=Count("endpoints"))
                 # no endpoint: a manual incident of the whole team (an automatic one whose
                 # endpoints were all deleted is nobody's page's any more)
                 .filter(Q(touched__gt=0) | Q(all_endpoints=0, manual=True),
                         timeline__public=True, timeline__at__gte=since)
                 .distinct().prefetch_related("endpoints", public))
    found = []
    for incident in incidents:
        updates = incident.public_updates
        # What the public was told last, never a status only a private update set.
        told = updates[0].status or incident.status
        found.append(PublicIncident(
            incident_id=incident.pk,
            services=sorted(names[e.pk] for e in incident.endpoints.all() if e.pk in names),
            status=IncidentStatus(told).label,
            resolved_at=incident.resolved_at if told == IncidentStatus.RESOLVED else None,
            updates=[PublicUpdate(u.at, IncidentStatus(u.status or incident.status).label,
                                  u.text) for u in updates]))
    found.sort(key=lambda i: i.updates[0].at, reverse=True)
    return found


def pages_for(update: IncidentUpdate) -> Iterable[tuple[StatusPage, list[str]]]:
    """The enabled status pages a public update reaches, each with the names it shows for the
    incident's endpoints ([] when the incident is the whole team's)."""
    incident = update.incident
    endpoint_ids = list(incident.endpoints.values_list("pk", flat=True))
    entries = StatusPageEndpoint.objects.for_team(incident.team_id).filter(
        status_page__enabled=True, status_page__team_id=incident.team_id)
    if endpoint_ids:
        entries = entries.filter(endpoint_id__in=endpoint_ids)
    pages: dict[int, tuple[StatusPage, list[str]]] = {}
    for entry in entries.select_related("status_page").order_by("position"):
        shown = pages.setdefault(entry.status_page_id, (entry.status_page, []))[1]
        if endpoint_ids:
            shown.append(entry.display_name)
    return pages.values()
