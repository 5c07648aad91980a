"""A team's incidents: the list (open first), one incident's page (its problems and timeline,
acknowledge, updates, resolve, postmortem), and a manual incident's form.

Reads need membership (outsiders get 404), changes a writing role (viewers get 403). The
rules (what an incident's state allows) are scans/notify/incidents.py's, as for the API."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from accounts.identity import SignedInRequest
from accounts.models import Team
from accounts.tenancy import Access, get_visible_or_404, require_write
from accounts.validators import validate_one_line
from accounts.views import team_for_request, team_to_create_in
from scans.history.slo_wording import duration_text
from scans.models import Endpoint, Incident, IncidentProblem, IncidentStatus, IncidentUpdate
from scans.notify import incidents

RESOLVED_PER_PAGE = 25
OPEN_STATUSES = [(s.value, s.label) for s in IncidentStatus if s != IncidentStatus.RESOLVED]
PUBLIC_HELP = ("Shown with its words on the team's public status pages that show one of the "
               "incident's endpoints (an incident with no endpoint: on every page).")


class UpdateForm(forms.Form):
    status = forms.ChoiceField(label="Status", choices=IncidentStatus.choices)
    text = forms.CharField(label="What is happening", max_length=5000, widget=forms.Textarea(
        attrs={"rows": 3}))
    public = forms.BooleanField(label="Show on the public status page", required=False,
                                help_text=PUBLIC_HELP)


class ManualForm(forms.Form):
    title = forms.CharField(label="Title", max_length=200, validators=[validate_one_line])
    endpoints = forms.MultipleChoiceField(
        label="Affected endpoints", required=False, widget=forms.CheckboxSelectMultiple,
        help_text="None: a problem of the whole team.")
    status = forms.ChoiceField(label="Status", choices=OPEN_STATUSES)
    text = forms.CharField(label="What is happening", max_length=5000, widget=forms.Textarea(
        attrs={"rows": 3}))
    public = forms.BooleanField(label="Show on the public status page", required=False,
                                help_text=PUBLIC_HELP)

    def __init__(self, *args: Any, team: Team, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.team_endpoints = {str(e.public_id): e
                               for e in Endpoint.objects.for_team(team).order_by("name")}
        field = self.fields["endpoints"]
        assert isinstance(field, forms.MultipleChoiceField)
        field.choices = [(key, e.name) for key, e in self.team_endpoints.items()]


class PostmortemForm(forms.Form):
    postmortem = forms.CharField(label="Postmortem", max_length=20000, widget=forms.Textarea(
        attrs={"rows": 8}), help_text="What happened, why, and what changes so it does not "
                                      "happen again.")


def _lasted(incident: Incident) -> str:
    return duration_text(((incident.resolved_at or timezone.now())
                          - incident.opened_at).total_seconds())


@login_required
def incident_list(request: SignedInRequest, slug: str) -> HttpResponse:
    team = team_for_request(request, slug)
    scope = Incident.objects.for_team(team).prefetch_related("endpoints")
    open_rows = list(scope.filter(resolved_at__isnull=True))
    resolved = Paginator(scope.filter(resolved_at__isnull=False), RESOLVED_PER_PAGE).get_page(
        request.GET.get("page"))
    return render(request, "scans/incidents.html", {
        "team": team, "open_rows": [(i, _lasted(i)) for i in open_rows],
        "resolved": resolved, "resolved_rows": [(i, _lasted(i)) for i in resolved],
        "group_minutes": int(incidents.GROUP_WINDOW.total_seconds() // 60),
        "can_write": Access.for_request(request).can_write(team.pk)})


@login_required
def incident_create(request: SignedInRequest, slug: str) -> HttpResponse:
    team = team_to_create_in(request, slug)
    form = ManualForm(request.POST or None, team=team,
                      initial={"status": IncidentStatus.INVESTIGATING})
    if request.method == "POST" and form.is_valid():
        c = form.cleaned_data
        incident = incidents.open_manual(
            team, c["title"], [form.team_endpoints[key] for key in c["endpoints"]],
            status=c["status"], text=c["text"], public=c["public"], user=request.user)
        messages.success(request, f"Incident {incident.title} opened.")
        return redirect("incident-detail", public_id=incident.public_id)
    return render(request, "scans/incident_form.html", {"team": team, "form": form},
                  status=400 if form.is_bound else 200)


def _detail(request: SignedInRequest, incident: Incident, *, update_form: UpdateForm | None = None,
            postmortem_form: PostmortemForm | None = None, status: int = 200) -> HttpResponse:
    team = incident.team
    problems = (IncidentProblem.objects.for_team(team).filter(incident=incident)
                .select_related("endpoint"))
    timeline = (IncidentUpdate.objects.for_team(team).filter(incident=incident)
                .select_related("alert").prefetch_related("alert__deliveries__channel"))
    return render(request, "scans/incident_detail.html", {
        "team": team, "incident": incident, "lasted": _lasted(incident),
        "problems": [(p, incidents.WORDS.get(p.trouble, p.trouble)) for p in problems],
        "timeline": timeline,
        "update_form": update_form or UpdateForm(initial={"status": incident.status}),
        "postmortem_form": postmortem_form or PostmortemForm(
            initial={"postmortem": incident.postmortem}),
        "can_write": Access.for_request(request).can_write(team.pk)}, status=status)


@login_required
def incident_detail(request: SignedInRequest, public_id: UUID) -> HttpResponse:
    incident = get_visible_or_404(request, Incident, public_id=public_id)
    team_for_request(request, incident.team.slug)
    return _detail(request, incident)


@login_required
@require_POST
def incident_acknowledge(request: SignedInRequest, public_id: UUID) -> HttpResponse:
    incident = get_visible_or_404(request, Incident, public_id=public_id)
    require_write(request, incident)
    if incidents.acknowledge(incident, user=request.user):
        messages.success(request, "Acknowledged: reminders of its endpoints stop.")
    else:
        messages.info(request, "Already acknowledged (or resolved).")
    return redirect("incident-detail", public_id=incident.public_id)


@login_required
@require_POST
def incident_update(request: SignedInRequest, public_id: UUID) -> HttpResponse:
    incident = get_visible_or_404(request, Incident, public_id=public_id)
    require_write(request, incident)
    form = UpdateForm(request.POST)
    if form.is_valid():
        c = form.cleaned_data
        try:
            incidents.post_update(incident, c["status"], c["text"], public=c["public"],
                                  user=request.user)
        except incidents.IncidentError as exc:
            form.add_error(None, str(exc))
        else:
            messages.success(request, "Update posted.")
            return redirect("incident-detail", public_id=incident.public_id)
    return _detail(request, incident, update_form=form, status=400)


@login_required
@require_POST
def incident_postmortem(request: SignedInRequest, public_id: UUID) -> HttpResponse:
    incident = get_visible_or_404(request, Incident, public_id=public_id)
    require_write(request, incident)
    form = PostmortemForm(request.POST)
    if form.is_valid():
        try:
            incidents.set_postmortem(incident, form.cleaned_data["postmortem"], user=request.user)
        except incidents.IncidentError as exc:
            form.add_error(None, str(exc))
        else:
            messages.success(request, "Postmortem saved.")
            return redirect("incident-detail", public_id=incident.public_id)
    return _detail(request, incident, postmortem_form=form, status=400)
