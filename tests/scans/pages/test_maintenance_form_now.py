"""The maintenance form starts now: a new window defaults to "now, for N minutes",
which stores a one-off window from now to N minutes on; the once and weekly sections keep
their own fields, and the one-off section's start defaults to now in the writer's zone."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from scans.models import MaintenanceWindow

pytestmark = pytest.mark.django_db


def test_pause_for_n_minutes_starts_a_window_now(world, owner_client):
    before = timezone.now()
    answer = owner_client.post(reverse("maintenance-create", args=[world.team.slug]), {
        "name": "quick reboot", "endpoint": "", "kind": "now", "for_minutes": "30",
        "timezone": "UTC", "starts_at": "", "ends_at": ""})

    assert answer.status_code == 302
    window = MaintenanceWindow.dangerously_unscoped.get(team=world.team)
    assert window.kind == "once"
    assert before - timedelta(seconds=1) <= window.starts_at <= timezone.now()
    assert window.ends_at - window.starts_at == timedelta(minutes=30)


def test_the_new_form_defaults_to_now(world, owner_client):
    body = owner_client.get(reverse("maintenance-create", args=[world.team.slug])).content.decode()

    assert re.search(r'<input type="radio" name="kind" value="now"[^>]*checked', body)
    assert 'name="for_minutes"' in body
    today = timezone.now().strftime("%Y-%m-%dT")
    assert f'name="starts_at" value="{today}' in body
    assert "<legend>Now</legend>" in body and "<legend>Once</legend>" in body
    assert "<legend>Every week</legend>" in body


def test_pause_for_too_many_minutes_is_refused_at_its_field(world, owner_client):
    answer = owner_client.post(reverse("maintenance-create", args=[world.team.slug]), {
        "name": "long", "endpoint": "", "kind": "now", "for_minutes": str(40 * 24 * 60),
        "timezone": "UTC"})

    assert answer.status_code == 400
    assert "at most 31 days" in " ".join(answer.context["form"].errors["for_minutes"])
