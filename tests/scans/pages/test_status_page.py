"""A team's public status page: a down endpoint (a real scan of a closed
loopback port) shows Down with its incident, another team's endpoints never appear, only the
names the team chose are shown, availability counts uncovered time as no data, the cache serves
the page and a settings change shows at once; slugs are validated; an off page is 404."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.core.cache import cache
from django.test import Client
from django.utils import timezone

from scans.models import Endpoint, MaintenanceWindow, Scan, StatusPage, StatusPageEndpoint
from scans.status_pages import rendering
from scans.status_pages.availability import daily_availability
from scans.status_pages.incidents import incidents
from scans.status_pages.rendering import CACHE_S
from scans.status_pages.settings import page_of, save_settings
from tests.conftest import clear_cache, free_port
from tests.helpers.factories import make_endpoint
from tests.scans.conftest import GRADE_A, GRADE_B, scan_at
from tests.scans.pages.test_down_not_a_grade import _scan_for_real

pytestmark = pytest.mark.django_db

DOWN_SCAN = {"down": True}


def _publish(team, *shown, slug=None, title="Acme status") -> StatusPage:
    page = page_of(team)
    return save_settings(
        page, enabled=True, slug=slug or page.slug, title=title, shown=list(shown)
    )


def _down_at(endpoint, when) -> Scan:
    """A stored down scan at `when` (what a dead port gives: no grade, `down`)."""
    scan = scan_at(endpoint, when, GRADE_A)
    Scan.dangerously_unscoped.filter(pk=scan.pk).update(down=True, grade="", points=None, uncapped_grade="")
    scan.refresh_from_db()
    return scan


def _public(slug) -> tuple[int, str]:
    response = Client().get(f"/status/{slug}/")
    return response.status_code, response.content.decode()


@pytest.fixture(autouse=True)
def _clear_cache():
    clear_cache()
    yield
    clear_cache()


def test_a_down_endpoint_shows_down_with_its_incident_and_no_other_teams_data(world, settings):
    settings.OUTBOUND_ALLOW = ["loopback"]
    now = timezone.now()
    dead_url = f"http://127.0.0.1:{free_port()}/v1"
    dead = make_endpoint(
        world.team,
        name="prod llama internal",
        base_url=dead_url,
        model="secret-model-7b",
        levels=[1],
        requests_per_level=2,
    )
    for hours in (5, 4, 3):
        scan_at(dead, now - timedelta(hours=hours), GRADE_B)
    _scan_for_real(dead)  # the worker's path against a closed port: stored down
    healthy = make_endpoint(world.team, name="staging box", model="other-model")
    for hours in (3, 2, 1):
        scan_at(healthy, now - timedelta(hours=hours), GRADE_A)
    hidden = make_endpoint(world.team, name="not on the page")
    scan_at(hidden, now - timedelta(hours=1), GRADE_A)
    rival = make_endpoint(world.other_team, name="globex rival box", model="globex-model")
    scan_at(rival, now - timedelta(hours=1), GRADE_A)
    _publish(world.other_team, (rival, "Globex API"), title="Globex status")
    page = _publish(world.team, (dead, "Chat API"), (healthy, ""), title="Example Inc. status")

    code, html = _public(page.slug)

    assert code == 200
    assert "Example Inc. status" in html
    assert 'data-service-state="down"' in html and ">Down<" in html
    assert "Down since" in html and "Some systems are down" in html
    assert html.count("data-incident") == 1 and "ongoing" in html
    assert "Chat API" in html and "staging box" in html  # chosen name; blank: its own name
    assert 'data-grade="A"' in html and 'data-grade="B"' in html  # last graded scans
    assert 'data-grade="F"' not in html  # down is not a grade
    for secret in (
        "prod llama internal",
        dead_url,
        "127.0.0.1",
        "secret-model-7b",
        "other-model",
        "not on the page",
        world.team.name,
        world.team.slug,
        "connection refused",
        "Globex",
        "globex rival box",
        "globex-model",
        world.other_team.slug,
    ):
        assert secret not in html, secret
    assert "csrfmiddlewaretoken" not in html and "<form" not in html and "<script" not in html


def test_a_recovered_incident_says_how_long_it_lasted(world):
    now = timezone.now().replace(second=0, microsecond=0)
    endpoint = make_endpoint(world.team, name="box", interval_minutes=5)
    start = now - timedelta(hours=2)
    scan_at(endpoint, start - timedelta(minutes=5), GRADE_A)
    _down_at(endpoint, start)
    _down_at(endpoint, start + timedelta(minutes=20))
    scan_at(endpoint, start + timedelta(minutes=37), GRADE_A)
    page = _publish(world.team, (endpoint, "API"))

    html = _public(page.slug)[1]

    assert "Recovered after 37 min" in html
    assert "All systems are up" in html and 'data-service-state="up"' in html


def test_incidents_come_from_the_sequence_of_down_scans_errored_ones_neither_break_nor_make_one(world):
    base = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
    endpoint = make_endpoint(world.team, interval_minutes=10)
    at = [base + timedelta(minutes=10 * i) for i in range(8)]
    scan_at(endpoint, at[0], GRADE_A)
    _down_at(endpoint, at[1])
    scan_at(endpoint, at[2], status="errored")  # our side: says nothing of the endpoint
    _down_at(endpoint, at[3])
    scan_at(endpoint, at[4], GRADE_A)  # recovered: 30 min after the first down scan
    scan_at(endpoint, at[5], status="errored")
    scan_at(endpoint, at[6], GRADE_B)
    _down_at(endpoint, at[7])  # down again, still

    found = incidents([endpoint], base - timedelta(days=1), at[7] + timedelta(minutes=3))

    newest, first = found[endpoint.pk]
    assert newest.ongoing and newest.started_at == at[7] and newest.down_scans == 1
    assert first.started_at == at[1] and first.ended_at == at[4] and first.down_scans == 2
    assert first.duration_s(at[7]) == 30 * 60 and not first.before_window


def test_availability_counts_only_covered_time_and_leaves_the_rest_as_no_data(world):
    now = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
    endpoint = make_endpoint(world.team, interval_minutes=60)
    yesterday = datetime(2026, 11, 28, 0, 0, tzinfo=UTC)
    scan_at(endpoint, yesterday + timedelta(hours=9), GRADE_A)  # stands for 09:00-10:00
    _down_at(endpoint, yesterday + timedelta(hours=10))  # 10:00-10:30, ended by the next scan
    scan_at(endpoint, yesterday + timedelta(hours=10, minutes=30), GRADE_A)  # 10:30-11:30
    scan_at(endpoint, now - timedelta(minutes=30), GRADE_A)  # today, 11:30 to now

    cells = daily_availability([endpoint], 90, now)[endpoint.pk]

    assert len(cells) == 90 and cells[-1].day == now.date()
    day = cells[-2]
    assert (day.covered_s, day.down_s) == (2.5 * 3600, 1800.0)
    assert day.kind == "partial" and day.availability == pytest.approx(0.8)
    assert "no data for 21 h 30 min" in day.text  # the uncovered rest of the day is not up
    assert cells[-1].kind == "up" and cells[-1].covered_s == 1800.0
    assert all(c.kind == "none" for c in cells[:-2])


def test_availability_leaves_maintenance_out_and_the_page_says_so(world):
    now = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
    endpoint = make_endpoint(world.team, name="box", interval_minutes=60)
    yesterday = datetime(2026, 11, 28, 0, 0, tzinfo=UTC)
    scan_at(endpoint, yesterday + timedelta(hours=9), GRADE_A)  # stands for 09:00-10:00
    _down_at(endpoint, yesterday + timedelta(hours=10))  # 10:00-10:30: down, in the window
    scan_at(endpoint, yesterday + timedelta(hours=10, minutes=30), GRADE_A)  # 10:30-11:30
    # The window covers the down half hour and the half hour after it, when the endpoint was up.
    MaintenanceWindow.dangerously_unscoped.create(
        team=world.team, endpoint=endpoint, name="upgrade", kind="once", timezone="UTC",
        starts_at=yesterday + timedelta(hours=10), ends_at=yesterday + timedelta(hours=11))
    # Another team's window (and one for another endpoint) changes nothing here.
    elsewhere = make_endpoint(world.other_team, name="theirs")
    MaintenanceWindow.dangerously_unscoped.create(
        team=world.other_team, endpoint=elsewhere, name="theirs", kind="once", timezone="UTC",
        starts_at=yesterday, ends_at=now)

    day = daily_availability([endpoint], 90, now)[endpoint.pk][-2]

    assert (day.covered_s, day.down_s, day.maintenance_s) == (1.5 * 3600, 0.0, 3600.0)
    assert day.kind == "up" and day.availability == 1.0  # the down half hour was maintenance
    assert day.uncovered_s == 24 * 3600 - 2.5 * 3600  # maintenance is not "no data" either
    assert "maintenance 1 h (not counted)" in day.text and "no data for 21 h 30 min" in day.text

    page = _publish(world.team, (endpoint, "box"))
    with time_machine.travel(now, tick=False):
        status, body = _public(page.slug)
    assert status == 200
    assert 'data-availability="1.0"' in body and "maintenance for 1 h not counted" in body
    assert "time in announced maintenance is left out" in body


def test_a_page_that_is_off_or_unknown_is_404(world):
    endpoint = make_endpoint(world.team)
    scan_at(endpoint, timezone.now() - timedelta(minutes=5), GRADE_A)
    page = page_of(world.team)
    StatusPageEndpoint.dangerously_unscoped.create(status_page=page, endpoint=endpoint,
                                                   display_name="Chat gateway")
    assert _public(page.slug)[0] == 404  # off until the team publishes it
    _publish(world.team, (endpoint, "Chat gateway"))
    assert _public(page.slug)[0] == 200
    save_settings(page, enabled=False, slug=page.slug, title="t",
                              shown=[(endpoint, "Chat gateway")])
    code, html = _public(page.slug)
    assert code == 404 and "Chat gateway" not in html
    assert _public("no-such-page")[0] == 404


def test_the_settings_page_saves_choices_and_refuses_bad_slugs(world, owner_client):
    endpoint = make_endpoint(world.team, name="box one")
    other = StatusPage.dangerously_unscoped.create(team=world.other_team, slug="taken-one")
    url = f"/teams/{world.team.slug}/status-page/"
    key = endpoint.public_id
    page = page_of(world.team)
    random_slug = page.slug
    assert len(random_slug) == 20 and random_slug.isalnum()

    for bad, says in (
        ("admin", "reserved"),
        ("Has Spaces", "lowercase"),
        ("ab", "3 to 50"),
        ("-edge-", "3 to 50"),
        ("a--b", "single hyphens"),
        (other.slug, "taken"),
    ):
        response = owner_client.post(url, {"enabled": "on", "slug": bad, "title": "T", f"show_{key}": "on"})
        assert response.status_code == 400, bad
        assert says in response.content.decode(), bad
        page.refresh_from_db()
        assert page.slug == random_slug and not page.enabled  # nothing saved
        assert "Globex" not in response.content.decode()  # "taken", never whose

    response = owner_client.post(
        url,
        {
            "enabled": "on",
            "slug": "acme-status",
            "title": "Ours",
            f"show_{key}": "on",
            f"name_{key}": "Public API",
        },
    )
    assert response.status_code == 302
    page.refresh_from_db()
    assert (page.enabled, page.slug, page.title) == (True, "acme-status", "Ours")
    (entry,) = StatusPageEndpoint.objects.for_team(world.team)
    assert entry.display_name == "Public API"
    assert "Public API" in _public("acme-status")[1]


def test_a_viewer_reads_the_settings_but_cannot_change_them(world, viewer_client):
    url = f"/teams/{world.team.slug}/status-page/"
    assert viewer_client.get(url).status_code == 200
    assert viewer_client.post(url, {"enabled": "on"}).status_code == 403
    assert not page_of(world.team).enabled


def test_the_cache_serves_the_page_and_a_settings_change_shows_at_once(world, owner_client):
    endpoint = make_endpoint(world.team, name="box")
    scan_at(endpoint, timezone.now() - timedelta(minutes=5), GRADE_A)
    page = _publish(world.team, (endpoint, "First name"))
    assert "First name" in _public(page.slug)[1]

    # Changed behind the settings' back: the cached copy is what visitors get meanwhile.
    StatusPageEndpoint.dangerously_unscoped.filter(status_page=page).update(display_name="Sneaky rename")
    Endpoint.dangerously_unscoped.filter(pk=endpoint.pk).update(name="renamed")
    assert "First name" in _public(page.slug)[1]
    assert cache.get(rendering._key(page.slug))["html"] is not None

    response = owner_client.post(
        f"/teams/{world.team.slug}/status-page/",
        {
            "enabled": "on",
            "slug": page.slug,
            "title": "Acme status",
            f"show_{endpoint.public_id}": "on",
            f"name_{endpoint.public_id}": "Second name",
        },
    )
    assert response.status_code == 302
    html = _public(page.slug)[1]
    assert "Second name" in html and "First name" not in html


def test_the_public_page_sets_no_cookie_and_may_be_cached_by_anyone(world):
    endpoint = make_endpoint(world.team)
    page = _publish(world.team, (endpoint, "API"))
    response = Client().get(f"/status/{page.slug}/")
    assert response.status_code == 200
    assert not response.cookies
    assert response["Cache-Control"] == f"public, max-age={CACHE_S}"
    assert "Cookie" not in response.get("Vary", "")
