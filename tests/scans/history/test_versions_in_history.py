"""History across scoring versions, end to end: an endpoint with scans graded under 0.9.0 and
then 1.0.0. Each grade keeps its version in the API, the charts break where it changes (marked
as a load change is), compare says the two were computed under different versions, and after
`manage.py regrade_scans` the history reads under one version, each re-grade said."""

from __future__ import annotations

import re
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.urls import reverse
from django.utils import timezone

from tests.conftest import bearer
from tests.scans.history.versions import CHANGED_LETTER, SAME_LETTER, stored_scan

pytestmark = pytest.mark.django_db

GAP = "inter_chunk_p95_at_concurrency_1"


@pytest.fixture
def history(endpoint):
    """Two scans under 0.9.0, then two under 1.0.0 (the release), oldest first."""
    now = timezone.now()
    return [stored_scan(endpoint, now - timedelta(hours=5), CHANGED_LETTER, "0.9.0"),
            stored_scan(endpoint, now - timedelta(hours=4), SAME_LETTER, "0.9.0"),
            stored_scan(endpoint, now - timedelta(hours=3), CHANGED_LETTER, "1.0.0"),
            stored_scan(endpoint, now - timedelta(hours=2), CHANGED_LETTER, "1.0.0")]


def get(client, name: str, *args) -> str:
    response = client.get(reverse(name, args=args))
    assert response.status_code == 200
    return response.content.decode()


def chart(body: str, name: str, check: str | None = None) -> str:
    """One chart's SVG from a page."""
    for svg in re.findall(r"<svg[^>]*>.*?</svg>", body, re.S):
        head = svg[:svg.index(">")]
        if f'data-chart="{name}"' in head and (check is None or f'data-check="{check}"' in head):
            return svg
    raise AssertionError(f"no {name} chart {check or ''}")


def breaks(svg: str) -> list[tuple[str, str, str, str]]:
    """Each break's kind, versions either side and the label drawn beside it."""
    return [(kind, old, new, re.search(r"<text[^>]*>([^<]*)</text>", inner)[1])
            for kind, old, new, inner in re.findall(
                r'<g class="version-break" data-kind="([^"]*)" data-from="([^"]*)" '
                r'data-to="([^"]*)">(.*?)</g>', svg, re.S)]


def history_api(api, world, endpoint) -> list[dict]:
    response = api.get(f"/api/v1/endpoints/{endpoint.public_id}/history/?check={GAP}",
                       **bearer(world.read_only_token))
    assert response.status_code == 200
    return response.json()["points"]


def regrade_all() -> str:
    out = StringIO()
    call_command("regrade_scans", "--scoring-version", "1.0.0", stdout=out)
    return out.getvalue()


def test_each_point_keeps_its_version_and_the_charts_break_at_the_change(
        world, api, owner_client, endpoint, history):
    points = history_api(api, world, endpoint)
    assert [(p["scoring_version"], p["status"]) for p in points] == [
        ("0.9.0", "warn"), ("0.9.0", "pass"), ("1.0.0", "fail"), ("1.0.0", "fail")]
    scan = api.get(f"/api/v1/scans/{history[0].public_id}/", **bearer(world.read_only_token))
    assert (scan.json()["grade"], scan.json()["scoring_version"]) == ("A", "0.9.0")
    listed = api.get(f"/api/v1/endpoints/{endpoint.public_id}/",
                     **bearer(world.read_only_token)).json()
    assert (listed["latest_scan"]["grade"], listed["latest_scan"]["scoring_version"]) == (
        "B", "1.0.0")

    body = get(owner_client, "endpoint-detail", endpoint.public_id)

    grades = chart(body, "grades")
    assert 'data-versions="0.9.0 1.0.0"' in grades and 'data-breaks="1"' in grades
    # Marked as a load change is: a dashed line with its words beside it, what changed on hover.
    assert breaks(grades) == [("version", "0.9.0", "1.0.0", "scoring 1.0.0")]
    assert "scoring version changed from 0.9.0 to 1.0.0" in grades
    assert breaks(chart(body, "check", GAP)) == [("version", "0.9.0", "1.0.0", "scoring 1.0.0")]
    assert "scoring versions 0.9.0 and 1.0.0" in body


def test_compare_says_the_grades_were_computed_under_different_versions(
        owner_client, endpoint, history):
    body = get(owner_client, "scan-compare", history[2].public_id)

    assert 'data-same-version="false"' in body
    note = re.search(r'<p class="version-note"[^>]*>(.*?)</p>', body, re.S)[1]
    assert "Computed under different scoring versions (0.9.0 vs 1.0.0)." in note
    first = re.search(r'<ul class="reasons"><li>(.*?)</li>', body, re.S)[1]
    assert first.startswith("The two grades were computed under different scoring versions "
                            "(0.9.0 vs 1.0.0): they are not comparable.")
    # The previous scan re-graded from its stored numbers under 1.0.0 is comparable, and said.
    assert ("re-graded under 1.0.0 from its stored values (nothing re-measured), the previous "
            "scan would be A with 100.0 points, which is comparable with this scan") in first
    assert 'data-regraded-grade="A"' in body and 'data-regraded-version="1.0.0"' in body


def test_compare_of_two_endpoints_across_versions_says_so(world, owner_client, endpoint,
                                                          history):
    from tests.helpers.factories import make_endpoint

    other = make_endpoint(world.team, name="older box")
    stored_scan(other, timezone.now() - timedelta(hours=1), CHANGED_LETTER, "0.9.0")

    response = owner_client.get(reverse("endpoints-compare", args=[world.team.slug]),
                                {"a": str(other.public_id), "b": str(endpoint.public_id)})

    body = response.content.decode()
    assert "Computed under different scoring versions (0.9.0 vs 1.0.0)." in body
    assert "older box would be B with 87.0 points" in body
    assert "which is comparable with llama on box" in body


def test_after_a_regrade_the_history_reads_under_one_version_and_says_each_regrade(
        world, api, owner_client, endpoint, history):
    assert "2 re-graded (1 same letter, 1 changed)" in regrade_all()

    points = history_api(api, world, endpoint)
    assert {p["scoring_version"] for p in points} == {"1.0.0"}
    assert [p["status"] for p in points] == ["fail", "pass", "fail", "fail"]
    body = get(owner_client, "endpoint-detail", endpoint.public_id)
    assert breaks(chart(body, "grades")) == []
    assert 'data-versions="1.0.0"' in chart(body, "grades")

    old = get(owner_client, "scan-detail", history[0].public_id)
    assert 'data-regraded-from="0.9.0"' in old
    assert "re-graded from 0.9.0 under 1.0.0" in old
    assert 'data-grade="B"' in old
    measured = get(owner_client, "scan-detail", history[3].public_id)
    assert "re-graded" not in measured  # graded under 1.0.0 as it was measured
    assert 'data-same-version="true"' in get(owner_client, "scan-compare",
                                              history[2].public_id)
