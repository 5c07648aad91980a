"""A new endpoint's page says once what is happening ("First scan running, up to about 2 min") instead
of "no scan yet" in every chart section; once a scan has finished, the charts take its place."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from scans.models import ProbeResult, Scan, ScanStatus
from tests.helpers.factories import make_endpoint
from tests.scans.conftest import GRADE_A, scan_at

pytestmark = pytest.mark.django_db


def _page(client, endpoint) -> str:
    return client.get(reverse("endpoint-detail", args=[endpoint.public_id])).content.decode()


def test_a_new_endpoint_has_one_empty_state_instead_of_an_empty_chart_per_section(world, owner_client):
    endpoint = make_endpoint(world.team, name="brand new")

    page = _page(owner_client, endpoint)

    assert 'data-first-scan="none"' in page and "First scan coming" in page
    assert "no scan yet in the last" not in page
    assert 'id="grades"' not in page and 'id="checks"' not in page


def _profiled(team, name="brand new"):
    # 8 + 2 rounds of requests; replies of up to 60 tokens at the assumed 30 tokens/s
    return make_endpoint(team, name=name, levels=[1, 4], requests_per_level=8, max_tokens=60)


def test_a_running_first_scan_says_so_with_its_profiles_duration_and_a_live_link(world, owner_client):
    endpoint = _profiled(world.team)
    started = timezone.now() - timedelta(seconds=20)
    running = Scan.dangerously_unscoped.create(endpoint=endpoint, trigger="manual", status=ScanStatus.RUNNING)
    Scan.dangerously_unscoped.filter(pk=running.pk).update(started_at=started)

    page = _page(owner_client, endpoint)

    assert 'data-first-scan="running"' in page
    # 10 s of set-up + 10 rounds × (1 s to a first token before any probe + 60 / 30 s)
    assert "First scan running, up to about 40 s" in page
    assert "by its profile: 10 rounds of requests with replies of up to 60 tokens" in page
    assert reverse("scan-detail", args=[running.public_id]) in page
    assert "no scan yet in the last" not in page


def test_the_estimate_is_the_endpoints_own_never_another_endpoints_scans(world, owner_client):
    for team, name in ((world.team, "ours"), (world.other_team, "theirs")):
        other = make_endpoint(team, name=name)
        for hours in (3, 2, 1):  # the factory's scans take one minute each
            scan_at(other, timezone.now() - timedelta(hours=hours), GRADE_A)
    endpoint = _profiled(world.team)
    now = timezone.now()
    ProbeResult.dangerously_unscoped.bulk_create(  # its probes: first token after 500 ms
        ProbeResult(endpoint=endpoint, location="site", at=now - timedelta(minutes=i), ok=True,
                    ttft_ms=500.0) for i in range(3))
    Scan.dangerously_unscoped.create(endpoint=endpoint, trigger="manual")

    page = _page(owner_client, endpoint)

    assert 'data-first-scan="queued"' in page and "First scan queued" in page
    section = page[page.index('id="first-scan"'):page.index("</section>", page.index('id="first-scan"'))]
    assert "up to about 35 s once it starts" in section  # 10 + 10 × (0.5 + 2)
    assert "60 s" not in section and "1 min" not in section  # the other scans' one minute


def test_once_a_scan_finished_the_charts_replace_the_empty_state(world, owner_client):
    endpoint = make_endpoint(world.team, name="scanned")
    scan_at(endpoint, timezone.now() - timedelta(minutes=5), GRADE_A)

    page = _page(owner_client, endpoint)

    assert 'id="first-scan"' not in page
    assert 'id="grades"' in page and 'id="checks"' in page
