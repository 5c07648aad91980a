"""Compare with the previous scan: each check's change and why the grade moved (caps, points,
pillars), and a clear note when the scoring versions differ."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.urls import reverse

from scans.grader import SCORING_VERSION
from scans.history.compare import compare
from tests.scans.conftest import (
    CAPPED_C,
    GRADE_A,
    GRADE_B,
    NO_LETTER,
    NOW,
    report_for,
    scan_at,
)

pytestmark = pytest.mark.django_db


def compare_page(client, scan) -> str:
    response = client.get(reverse("scan-compare", args=[scan.public_id]))
    assert response.status_code == 200
    return response.content.decode()


def test_a_cap_that_starts_to_apply_is_named_as_the_reason(owner_client, endpoint):
    scan_at(endpoint, NOW - timedelta(hours=2), GRADE_A)
    scan = scan_at(endpoint, NOW - timedelta(hours=1), CAPPED_C)

    body = compare_page(owner_client, scan)

    assert 'data-same-version="true"' in body and 'data-grade-moved="down"' in body
    assert "The grade went from A to C." in body
    assert ("The cap “time to first token fails its threshold with only one request in "
            "flight” (ttft_at_concurrency_1_failed) now applies: the grade can be no better "
            "than C.") in body
    assert "The points went from 100.0 to 87.0 (-13.0); the band they reach went from A to B." \
        in body
    assert re.search(r"latency: 100\.0 → 66\.7 pillar points, -13\.0 points to the total\.",
                     body)
    row = re.search(r'<tr data-check="ttft_p95_at_concurrency_1"[^>]*>(.*?)</tr>', body, re.S)
    assert 'data-direction="worse"' in row[0] and 'class="changed"' in row[0]
    assert "210.0 ms" in row[1] and "2,500.0 ms" in row[1] and "+2,290.0 ms" in row[1]
    assert "Different scoring versions" not in body


def test_a_lifted_cap_and_an_unchanged_grade_are_said_plainly(owner_client, endpoint):
    scan_at(endpoint, NOW - timedelta(hours=3), CAPPED_C)
    scan_at(endpoint, NOW - timedelta(hours=2), GRADE_A)
    same = scan_at(endpoint, NOW - timedelta(hours=1), GRADE_A)
    lifted = compare(report_for(CAPPED_C), report_for(GRADE_A))

    assert lifted.grade_moved == "up"
    assert any("(ttft_at_concurrency_1_failed, at best C) no longer applies" in r
               for r in lifted.reasons)
    body = compare_page(owner_client, same)
    assert "The grade held at A." in body and "The points held at 100.0 (band A)." in body


def test_different_scoring_versions_are_said_before_anything_else(owner_client, endpoint):
    scan_at(endpoint, NOW - timedelta(hours=2), GRADE_A, version="0.8.0")
    scan = scan_at(endpoint, NOW - timedelta(hours=1), GRADE_B)

    body = compare_page(owner_client, scan)

    assert 'data-same-version="false"' in body
    note = re.search(r'<p class="version-note"[^>]*>(.*?)</p>', body, re.S)[1]
    assert f"Computed under different scoring versions (0.8.0 vs {SCORING_VERSION})." in note
    assert f"Previous scan: graded under scoring 0.8.0; this scan: under {SCORING_VERSION}" in note
    assert "Grades of different versions are not comparable" in note
    assert body.index("version-note") < body.index("Why the grade")
    first_reason = re.search(r'<ul class="reasons"><li>(.*?)</li>', body, re.S)[1]
    assert first_reason.startswith("The two grades were computed under different scoring "
                                   f"versions (0.8.0 vs {SCORING_VERSION}): they are not "
                                   "comparable.")
    # The previous values re-graded under this site's version give a comparable figure.
    assert 'data-regraded-grade="A"' in body
    assert (f"re-graded under {SCORING_VERSION} from its stored values (nothing re-measured), "
            "the previous scan would be A with 100.0 points, which is comparable with this "
            "scan") in first_reason


def test_a_scan_with_no_letter_explains_why(owner_client, endpoint):
    scan_at(endpoint, NOW - timedelta(hours=2), GRADE_A)
    scan = scan_at(endpoint, NOW - timedelta(hours=1), NO_LETTER)

    body = compare_page(owner_client, scan)

    assert "The grade went from A to no letter." in body
    assert "This scan has no letter: the reliability pillar has no graded check" in body
    assert 'data-grade-moved="down"' in body


def test_the_first_scan_has_nothing_to_compare_with(owner_client, endpoint):
    scan = scan_at(endpoint, NOW - timedelta(hours=1), GRADE_A)

    assert "No earlier scan to compare with" in compare_page(owner_client, scan)


def test_an_errored_scan_is_skipped_as_the_previous_and_has_nothing_itself(owner_client,
                                                                          endpoint):
    scan_at(endpoint, NOW - timedelta(hours=3), GRADE_B)
    errored = scan_at(endpoint, NOW - timedelta(hours=2), status="errored")
    scan = scan_at(endpoint, NOW - timedelta(hours=1), GRADE_A)

    assert "The grade went from B to A." in compare_page(owner_client, scan)
    assert "so there is nothing to compare" in compare_page(owner_client, errored)


def test_a_scan_of_another_endpoint_is_never_the_previous_one(world, owner_client, endpoint):
    from tests.helpers.factories import make_endpoint

    other = make_endpoint(world.team, name="other")
    scan_at(other, NOW - timedelta(hours=2), CAPPED_C)
    scan = scan_at(endpoint, NOW - timedelta(hours=1), GRADE_A)

    assert "No earlier scan to compare with" in compare_page(owner_client, scan)
