"""The audit log page: a team's changes, newest first, for its owners and admins."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import HttpResponse
from django.shortcuts import render

from accounts.identity import SignedInRequest
from accounts.tenancy import require_manage
from accounts.views import team_for_request
from audit.models import AuditEntry
from audit.snapshot import OBJECT_TYPES

ENTRIES_PER_PAGE = 50


@login_required
def team_audit(request: SignedInRequest, slug: str) -> HttpResponse:
    team = team_for_request(request, slug)
    require_manage(request, team)
    entries = AuditEntry.objects.for_team(team).order_by("-at", "-id")
    object_type = request.GET.get("object_type", "")
    actor = request.GET.get("actor", "")
    if object_type:
        entries = entries.filter(object_type=object_type)
    if actor:
        entries = entries.filter(actor=actor)
    actors = (AuditEntry.objects.for_team(team).order_by("actor").values_list("actor", flat=True)
              .distinct())
    page = Paginator(entries, ENTRIES_PER_PAGE).get_page(request.GET.get("page"))
    return render(request, "audit/team_audit.html", {
        "team": team, "page": page, "object_types": OBJECT_TYPES, "actors": list(actors),
        "object_type": object_type, "actor": actor})
