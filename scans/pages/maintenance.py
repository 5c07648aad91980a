"""The team's maintenance windows: list (with each one's next time), create, edit, delete.

Reads need membership (outsiders get 404), writes a writing role (viewers get 403). Times are
typed in the window's own timezone (the creator's profile timezone by default) and stored in
UTC with that zone's name. Bad input (an end before the start, a weekly window with no day, a
duration of zero or less, a one-off window outside scans.maintenance's bounds) is an error at
the field and nothing is saved. The list says how much time each window has taken out of
availability over the status page's days."""

from __future__ import annotations

import zoneinfo
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone

from accounts.identity import SignedInRequest
from accounts.models import Profile, Team
from accounts.tenancy import Access, get_visible_or_404, require_write
from accounts.validators import validate_one_line
from accounts.views import team_for_request, team_to_create_in
from audit import record as audit
from scans import maintenance
from scans.models import Endpoint, MaintenanceKind, MaintenanceWindow
from scans.status_pages import availability, subscriptions

LOCAL_FORMAT = "%Y-%m-%dT%H:%M"
NOW = "now"  # the form's "now, for N minutes": stored as a one-off window from now
ZONES = sorted(zoneinfo.available_timezones() - {"localtime", "Factory"})


class MaintenanceForm(forms.Form):
    name = forms.CharField(label="Name", max_length=100, validators=[validate_one_line])
    endpoint = forms.ChoiceField(label="Applies to", required=False)
    kind = forms.ChoiceField(
        label="When",
        choices=[(NOW, "Now, for a number of minutes"), *MaintenanceKind.choices],
        widget=forms.RadioSelect,
        initial=NOW,
    )
    for_minutes = forms.IntegerField(
        label="For (minutes)",
        required=False,
        initial=60,
        min_value=1,
        help_text="Starts as you save: a quick pause of alerts for planned work.",
    )
    starts_at = forms.DateTimeField(
        label="Starts",
        required=False,
        help_text=f"No earlier than {maintenance.span_text(maintenance.PAST_GRACE)} before now: "
        "a window cannot take past time out of availability.",
        input_formats=[LOCAL_FORMAT],
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}, format=LOCAL_FORMAT),
    )
    ends_at = forms.DateTimeField(
        label="Ends",
        required=False,
        help_text=f"At most {maintenance.span_text(maintenance.MAX_LENGTH)} after the start.",
        input_formats=[LOCAL_FORMAT],
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}, format=LOCAL_FORMAT),
    )
    weekdays = forms.TypedMultipleChoiceField(
        label="Days",
        required=False,
        coerce=int,
        widget=forms.CheckboxSelectMultiple,
        choices=list(enumerate(maintenance.WEEKDAY_NAMES)),
    )
    start_time = forms.TimeField(
        label="At", required=False, widget=forms.TimeInput(attrs={"type": "time"}, format="%H:%M")
    )
    duration_minutes = forms.IntegerField(label="For (minutes)", required=False)
    timezone = forms.ChoiceField(label="Timezone", choices=[(z, z) for z in ZONES])
    pause_scans = forms.BooleanField(
        label="Pause scheduled scans during the window",
        required=False,
        help_text="Off: scans still run (their time is left out of the SLO either way).",
    )

    def __init__(self, *args: Any, team: Team, window: MaintenanceWindow | None = None,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.window = window  # the stored window being edited, if any
        endpoints = Endpoint.objects.for_team(team).order_by("name")
        self.endpoints = {str(e.public_id): e for e in endpoints}
        choices = [("", "Every endpoint of the team")]
        choices += [(key, e.name) for key, e in self.endpoints.items()]
        field = self.fields["endpoint"]
        assert isinstance(field, forms.ChoiceField)
        field.choices = choices

    def clean(self) -> dict[str, Any]:
        # Only parsing here: the rules are scans.maintenance.window_errors, as for the API.
        cleaned = super().clean() or {}
        kind = cleaned.get("kind")
        if not kind:
            return cleaned
        zone = zoneinfo.ZoneInfo(cleaned.get("timezone") or "UTC")
        now = timezone.now()
        moved = {}  # a rule about the computed span is said at the minutes typed
        if kind == NOW:
            if cleaned.get("for_minutes") is None:
                if "for_minutes" not in self.errors:
                    self.add_error("for_minutes", "Give how many minutes, from now.")
                return cleaned
            cleaned["starts_at"] = now.replace(microsecond=0)
            cleaned["ends_at"] = cleaned["starts_at"] + timedelta(minutes=cleaned["for_minutes"])
            moved = {"starts_at": "for_minutes", "ends_at": "for_minutes"}
        elif kind == MaintenanceKind.ONCE:
            for name in ("starts_at", "ends_at"):
                if cleaned.get(name) is not None:
                    # typed in the window's timezone, not the page's
                    naive = timezone.make_naive(cleaned[name])
                    cleaned[name] = naive.replace(tzinfo=zone)
        stored_kind = MaintenanceKind.ONCE if kind == NOW else kind
        refused = maintenance.window_errors(
            stored_kind, starts_at=cleaned.get("starts_at"), ends_at=cleaned.get("ends_at"),
            weekdays=cleaned.get("weekdays"), start_time=cleaned.get("start_time"),
            duration_minutes=cleaned.get("duration_minutes"), now=now,
            before=self._covered() if kind == MaintenanceKind.ONCE else None)
        for field, message in refused.items():
            field = moved.get(field, field)
            if field not in self.errors:  # a value that did not parse says so already
                self.add_error(field, message)
        return cleaned

    def _covered(self) -> tuple[datetime, datetime] | None:
        """The span the edited window covers already, when the edit keeps what it applies to
        (moved to other endpoints, all of its time would be new to them)."""
        window = self.window
        if window is None or window.kind != MaintenanceKind.ONCE:
            return None
        if window.starts_at is None or window.ends_at is None:
            return None
        chosen = self.endpoints.get(self.cleaned_data.get("endpoint") or "")
        if (chosen.pk if chosen else None) != window.endpoint_id:
            return None
        # The form shows whole minutes: a stored start with seconds comes back a little earlier.
        return window.starts_at.replace(second=0, microsecond=0), window.ends_at

    def apply(self, window: MaintenanceWindow) -> MaintenanceWindow:
        c = self.cleaned_data
        window.name = c["name"]
        window.endpoint = self.endpoints.get(c.get("endpoint") or "")
        window.kind = MaintenanceKind.ONCE if c["kind"] == NOW else c["kind"]
        window.timezone = c["timezone"]
        window.pause_scans = c.get("pause_scans", False)
        once = window.kind == MaintenanceKind.ONCE
        window.starts_at = c.get("starts_at") if once else None
        window.ends_at = c.get("ends_at") if once else None
        window.weekdays = [] if once else sorted(c.get("weekdays") or [])
        window.start_time = None if once else c.get("start_time")
        window.duration_minutes = None if once else c.get("duration_minutes")
        return window


def _initial(window: MaintenanceWindow) -> dict:
    zone = maintenance.zone(window.timezone)

    def local(at: datetime | None) -> str:
        return at.astimezone(zone).strftime(LOCAL_FORMAT) if at else ""

    return {
        "name": window.name,
        "kind": window.kind,
        "timezone": window.timezone,
        "endpoint": str(window.endpoint.public_id) if window.endpoint else "",
        "starts_at": local(window.starts_at),
        "ends_at": local(window.ends_at),
        "weekdays": window.weekdays,
        "start_time": window.start_time,
        "duration_minutes": window.duration_minutes,
        "pause_scans": window.pause_scans,
    }


def _user_zone(request: SignedInRequest) -> str:
    zone = Profile.objects.filter(user_id=request.user.pk).values_list("timezone", flat=True).first()
    return str(zone or "UTC")


def _excluded_text(span: timedelta) -> str:
    minutes = int(span.total_seconds() // 60)
    taken = maintenance.duration_text(minutes) if minutes else "no time"
    return f"took {taken} out of availability in the last {availability.DAYS} days"


@login_required
def maintenance_list(request: SignedInRequest, slug: str) -> HttpResponse:
    team = team_for_request(request, slug)
    now = timezone.now()
    windows = list(MaintenanceWindow.objects.for_team(team).select_related("endpoint"))
    nexts = {o.window.pk: o for o in maintenance.upcoming(team.pk, now, days=400)}
    rows = [
        {
            "window": w,
            "when": maintenance.describe(w),
            "next": nexts.get(w.pk),
            "now": bool(nexts.get(w.pk) and nexts[w.pk].covers(now)),
            "excluded": _excluded_text(maintenance.excluded(w, now, availability.DAYS)),
        }
        for w in windows
    ]
    return render(
        request,
        "scans/maintenance.html",
        {"team": team, "rows": rows, "can_write": Access.for_request(request).can_write(team.pk)},
    )


@login_required
def maintenance_create(request: SignedInRequest, slug: str) -> HttpResponse:
    team = team_to_create_in(request, slug)
    zone = _user_zone(request)
    now = timezone.now().astimezone(maintenance.zone(zone))
    # A new window starts now unless told otherwise (the "now, for N minutes" choice).
    initial = {"timezone": zone, "starts_at": now.strftime(LOCAL_FORMAT),
               "ends_at": (now + timedelta(hours=1)).strftime(LOCAL_FORMAT)}
    form = MaintenanceForm(request.POST or None, team=team, initial=initial)
    if request.method == "POST" and form.is_valid():
        window = form.apply(MaintenanceWindow(team=team))
        with audit.track(window):
            window.save()
        subscriptions.maintenance_news(window)  # never raises; mailed once committed
        messages.success(request, f"Maintenance window {window.name} added.")
        return redirect("team-maintenance", slug=team.slug)
    return render(
        request,
        "scans/maintenance_form.html",
        {"team": team, "form": form, "window": None},
        status=400 if form.is_bound else 200,
    )


@login_required
def maintenance_edit(request: SignedInRequest, public_id: UUID) -> HttpResponse:
    window = get_visible_or_404(request, MaintenanceWindow, public_id=public_id)
    require_write(request, window)
    team = window.team
    form = MaintenanceForm(request.POST or None, team=team, window=window, initial=_initial(window))
    if request.method == "POST" and form.is_valid():
        with audit.track(window):
            form.apply(window).save()
        messages.success(request, f"Maintenance window {window.name} saved.")
        return redirect("team-maintenance", slug=team.slug)
    return render(
        request,
        "scans/maintenance_form.html",
        {"team": team, "form": form, "window": window},
        status=400 if form.is_bound else 200,
    )


@login_required
def maintenance_delete(request: SignedInRequest, public_id: UUID) -> HttpResponse:
    """GET: a confirmation page; POST: delete the window (past SLO figures count its time
    again)."""
    window = get_visible_or_404(request, MaintenanceWindow, public_id=public_id)
    require_write(request, window)
    team = window.team
    if request.method == "POST":
        with audit.track(window):
            MaintenanceWindow.objects.for_team(team).filter(pk=window.pk).delete()
        messages.success(request, f"Maintenance window {window.name} was deleted.")
        return redirect("team-maintenance", slug=team.slug)
    return render(request, "scans/maintenance_delete.html", {"team": team, "window": window})
