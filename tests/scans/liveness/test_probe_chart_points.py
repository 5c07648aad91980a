"""The endpoint page's probe chart over a long range: a month of one-minute probes is drawn
as at most the page's chart points per location, and the merged points keep the exact mean
TTFT and probe count of the hours they stand for."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from scans.liveness import history
from scans.models import ProbeHour
from scans.pages.endpoint import CHECK_CHART_POINTS
from tests.helpers.factories import make_endpoint

pytestmark = pytest.mark.django_db


def _a_month_of_hours(endpoint, now):
    start = now.replace(minute=0, second=0, microsecond=0) - timedelta(days=30)
    ProbeHour.objects.for_team(endpoint.team_id).bulk_create(
        ProbeHour(endpoint=endpoint, location="site", hour=start + timedelta(hours=h),
                  probes=60, failed=0, covered_s=3600, down_s=0,
                  ttft_sum=60.0 * (30 + h % 7), ttft_n=60 - h % 3, ttft_min=30, ttft_max=36)
        for h in range(30 * 24))


def test_a_month_of_probe_hours_is_drawn_as_the_pages_chart_points(world):
    endpoint = make_endpoint(world.team)
    now = timezone.now()
    _a_month_of_hours(endpoint, now)
    since = now - timedelta(days=30)

    every_hour = history.series(endpoint, since, now)["site"]
    merged = history.series(endpoint, since, now, max_points=CHECK_CHART_POINTS)["site"]

    assert len(every_hour) > 700
    assert len(merged) <= CHECK_CHART_POINTS
    assert sum(p.probes for p in merged) == sum(p.probes for p in every_hour)
    hours = ProbeHour.objects.for_team(world.team).filter(endpoint=endpoint, hour__gte=since)
    first = merged[0]
    in_first = [h for h in hours.order_by("hour") if h.hour <= first.last_at]
    assert first.ttft_ms == pytest.approx(sum(h.ttft_sum for h in in_first)
                                          / sum(h.ttft_n for h in in_first))


def test_the_endpoint_page_draws_a_months_probes(world):
    endpoint = make_endpoint(world.team)
    _a_month_of_hours(endpoint, timezone.now())
    client = Client()
    client.force_login(world.member)

    page = client.get(reverse("endpoint-detail", kwargs={"public_id": endpoint.public_id})
                      + "?range=30d")

    assert page.status_code == 200
    assert b"Probe time to first token" in page.content
