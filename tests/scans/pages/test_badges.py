"""Public badges: /badge/<key>.svg and the shields.io endpoint JSON. No login, no cookies,
nothing but the grade; cached briefly; an unknown or rotated key is a 404."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse

from tests.scans.conftest import (
    CAPPED_C,
    CAPPED_D,
    GRADE_A,
    GRADE_B,
    NO_LETTER,
    NOW,
    scan_at,
    with_values,
)

pytestmark = pytest.mark.django_db

GRADE_F = with_values(GRADE_A, error_rate=0.5, error_rate_at_peak=0.9)


def svg(client, endpoint):
    response = client.get(reverse("badge-svg", args=[endpoint.badge_key]))
    assert response.status_code == 200
    return response, ET.fromstring(response.content)  # noqa: S314 - our own output


def shield(client, endpoint):
    response = client.get(reverse("badge-json", args=[endpoint.badge_key]))
    assert response.status_code == 200
    return response, response.json()


@pytest.mark.parametrize(("values", "grade", "colour"), [
    (GRADE_A, "A", "1a9c5b"), (GRADE_B, "B", "6fae2b"), (CAPPED_C, "C", "d9a400"),
    (CAPPED_D, "D", "e07b1a"), (GRADE_F, "F", "d23b3b"),
])
def test_the_badge_shows_the_latest_grade_in_its_bands_colour(endpoint, values, grade, colour):
    scan_at(endpoint, NOW - timedelta(hours=1), values)

    _, root = svg(Client(), endpoint)
    _, data = shield(Client(), endpoint)

    assert root.get("data-grade") == grade
    assert root.get("data-colour") == f"#{colour}"
    assert data == {"schemaVersion": 1, "label": "tokvera", "message": grade,
                    "color": colour, "cacheSeconds": 300}


def test_a_provisional_grade_says_so_and_a_calibrated_one_does_not(endpoint):
    scan_at(endpoint, NOW - timedelta(hours=2), GRADE_B, version="0.9.0")
    _, root = svg(Client(), endpoint)
    assert root.get("data-provisional") == "true"
    assert "B (provisional)" in [t.text for t in root.iter("{http://www.w3.org/2000/svg}text")]

    scan_at(endpoint, NOW - timedelta(hours=1), GRADE_B)  # graded under 1.0.0
    _, root = svg(Client(), endpoint)
    _, data = shield(Client(), endpoint)
    assert root.get("data-provisional") == "false"
    assert data["message"] == "B"


def test_an_endpoint_never_scanned_has_a_no_grade_badge(endpoint):
    _, root = svg(Client(), endpoint)
    _, data = shield(Client(), endpoint)

    assert root.get("data-grade") == "none"
    assert data["message"] == "no grade" and data["color"] == "8a90a0"


def test_a_scan_with_no_letter_gives_a_no_grade_badge(endpoint):
    scan_at(endpoint, NOW - timedelta(hours=1), NO_LETTER)

    _, data = shield(Client(), endpoint)

    assert data["message"] == "no grade"


def test_errored_and_running_scans_leave_the_last_grade_on_the_badge(endpoint):
    scan_at(endpoint, NOW - timedelta(hours=3), GRADE_B)
    scan_at(endpoint, NOW - timedelta(hours=2), status="errored")
    scan_at(endpoint, NOW - timedelta(hours=1), status="running")

    _, data = shield(Client(), endpoint)

    assert data["message"] == "B"


def test_badges_are_cached_briefly_and_set_no_cookie_even_for_a_logged_in_visitor(
        world, endpoint, owner_client):
    scan_at(endpoint, NOW - timedelta(hours=1), GRADE_A)
    for name in ("badge-svg", "badge-json"):
        response = owner_client.get(reverse(name, args=[endpoint.badge_key]))

        max_age = int(re.fullmatch(r"public, max-age=(\d+)", response["Cache-Control"])[1])
        assert 0 < max_age <= 300
        assert not response.cookies
        assert "Cookie" not in response.get("Vary", "")
        assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Content-Type"] == "application/json"


def test_the_svg_badge_is_served_as_svg_with_a_strict_policy(endpoint):
    response, _ = svg(Client(), endpoint)

    assert response["Content-Type"] == "image/svg+xml; charset=utf-8"
    assert "default-src 'none'" in response["Content-Security-Policy"]


def test_a_badge_tells_nothing_beyond_the_grade(world, endpoint):
    scan_at(endpoint, NOW - timedelta(hours=1), CAPPED_C)

    for name in ("badge-svg", "badge-json"):
        body = Client().get(reverse(name, args=[endpoint.badge_key])).content.decode()
        for private in (world.team.name, world.team.slug, endpoint.name, endpoint.model,
                        endpoint.base_url, str(endpoint.public_id), "ttft", "points"):
            assert private not in body, (name, private)


@pytest.mark.parametrize("key", ["unknown-key-1234567890", "short"])
def test_an_unknown_key_is_a_404(db, key):
    client = Client()
    assert client.get(f"/badge/{key}.svg").status_code == 404
    assert client.get(f"/badge/{key}.json").status_code == 404


def test_rotating_the_key_retires_the_old_badge_urls(world, endpoint, owner_client):
    old_key = endpoint.badge_key

    response = owner_client.post(reverse("endpoint-badge-rotate", args=[endpoint.public_id]))

    assert response.status_code == 302
    endpoint.refresh_from_db()
    assert endpoint.badge_key != old_key
    assert Client().get(f"/badge/{old_key}.svg").status_code == 404
    assert Client().get(f"/badge/{old_key}.json").status_code == 404
    assert Client().get(f"/badge/{endpoint.badge_key}.svg").status_code == 200


def test_only_owners_and_admins_can_rotate_the_key(world, endpoint):
    old_key = endpoint.badge_key
    member = Client()
    member.force_login(world.member)

    response = member.post(reverse("endpoint-badge-rotate", args=[endpoint.public_id]))

    assert response.status_code == 403
    endpoint.refresh_from_db()
    assert endpoint.badge_key == old_key
