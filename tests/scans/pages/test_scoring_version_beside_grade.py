"""Every page that shows a grade shows the scoring version that computed it beside it: the
endpoint page (latest grade and each scan), the scan page, the dashboard row, compare and the
public status page. A grade of 0.9.0 and one of 1.0.0 are not the same measure."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from scans.status_pages.settings import page_of, save_settings
from tests.conftest import clear_cache
from tests.scans.history.versions import CHANGED_LETTER, stored_scan

pytestmark = pytest.mark.django_db


def get(client, name: str, *args) -> str:
    response = client.get(reverse(name, args=args))
    assert response.status_code == 200
    return response.content.decode()


def beside(body: str, grade: str, version: str, within: int = 400) -> bool:
    """The grade's letter, and its version no further on than `within` characters."""
    for found in re.finditer(rf'data-grade="{grade}"', body):
        if f'data-scoring-version="{version}"' in body[found.start():found.start() + within]:
            return True
    return False


@pytest.fixture
def old_then_new(endpoint):
    now = timezone.now()
    return (stored_scan(endpoint, now - timedelta(hours=3), CHANGED_LETTER, "0.9.0"),
            stored_scan(endpoint, now - timedelta(hours=2), CHANGED_LETTER, "1.0.0"))


def test_the_endpoint_page_shows_the_version_beside_the_latest_grade_and_each_scan(
        owner_client, endpoint, old_then_new):
    body = get(owner_client, "endpoint-detail", endpoint.public_id)

    latest = re.search(r'<p data-latest-source=.*?</p>', body, re.S)[0]
    assert 'data-grade="B"' in latest and 'data-scoring-version="1.0.0"' in latest
    assert "scoring 1.0.0" in latest
    rows = {scan: re.search(rf'<tr data-scan="{scan.public_id}".*?</tr>', body, re.S)[0]
            for scan in old_then_new}
    old, new = old_then_new
    assert beside(rows[old], "A", "0.9.0") and "provisional" in rows[old]
    assert beside(rows[new], "B", "1.0.0") and "provisional" not in rows[new]


def test_the_scan_page_shows_the_version_it_was_graded_under(owner_client, old_then_new):
    old, new = old_then_new
    body = get(owner_client, "scan-detail", old.public_id)

    facts = re.search(r'<dl class="facts">.*?</dl>', body, re.S)[0]
    assert beside(facts, "A", "0.9.0")
    assert "re-graded" not in facts  # graded as it was measured


def test_the_dashboard_row_shows_the_version_beside_the_latest_grade(world, owner_client,
                                                                      endpoint, old_then_new):
    body = get(owner_client, "team-dashboard", world.team.slug)

    row = re.search(rf'<tr data-endpoint="{endpoint.public_id}".*?</tr>', body, re.S)[0]
    assert beside(row, "B", "1.0.0")


def test_compare_shows_each_side_with_its_version(owner_client, old_then_new):
    body = get(owner_client, "scan-compare", old_then_new[1].public_id)

    versus = re.search(r'<div class="versus">.*?<h2>', body, re.S)[0]
    assert versus.index('data-scoring-version="0.9.0"') < versus.index('data-grade="A"')
    assert versus.index('data-scoring-version="1.0.0"') < versus.index('data-grade="B"')


def test_the_public_status_page_shows_the_version_beside_the_grade(world, endpoint,
                                                                     old_then_new):
    clear_cache()
    page = save_settings(page_of(world.team), enabled=True, slug=page_of(world.team).slug,
                         title="Acme status", shown=[(endpoint, "Chat API")])

    body = Client().get(f"/status/{page.slug}/").content.decode()
    clear_cache()

    assert beside(body, "B", "1.0.0")
    assert "scoring 1.0.0" in body
