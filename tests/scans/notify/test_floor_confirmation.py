"""Below the grade floor is news only when the endpoint's last `confirm_after` graded scans
agree (default 2), and so is meeting it again: a scan with one lost request among good ones
never flips the alert, and the first bad scan brings the next one forward to confirm it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from scans.models import AlertEvent, Endpoint
from tests.helpers.factories import make_endpoint
from tests.scans.conftest import CAPPED_D, GRADE_A, NOW, scan_at

pytestmark = pytest.mark.django_db


def _kinds(endpoint) -> list[str]:
    return list(AlertEvent.dangerously_unscoped.filter(endpoint=endpoint)
                .order_by("created_at").values_list("kind", flat=True))


def test_below_the_floor_is_told_once_two_scans_agree_and_the_first_brings_the_next_forward(
        world):
    endpoint = make_endpoint(world.team)  # floor B; D is below it
    later = timezone.now() + timedelta(minutes=50)
    Endpoint.dangerously_unscoped.filter(pk=endpoint.pk).update(next_scan_at=later)

    scan_at(endpoint, NOW, GRADE_A)
    scan_at(endpoint, NOW + timedelta(hours=1), CAPPED_D)
    assert _kinds(endpoint) == []  # one bad scan: not news yet...
    assert Endpoint.dangerously_unscoped.get(pk=endpoint.pk).next_scan_at <= timezone.now()
    scan_at(endpoint, NOW + timedelta(hours=1, minutes=2), CAPPED_D)
    assert _kinds(endpoint) == ["below_floor"]  # ...two in a row are
    scan_at(endpoint, NOW + timedelta(hours=2), CAPPED_D)
    scan_at(endpoint, NOW + timedelta(hours=3), GRADE_A)
    assert _kinds(endpoint) == ["below_floor"]  # one good scan is not a recovery
    scan_at(endpoint, NOW + timedelta(hours=3, minutes=2), GRADE_A)
    assert _kinds(endpoint) == ["below_floor", "floor_recovered"]


@pytest.mark.parametrize("confirm_after, told", [
    (2, []),
    (1, ["below_floor", "floor_recovered", "below_floor", "floor_recovered"]),
])
def test_one_bad_scan_among_good_ones_flips_nothing_unless_the_team_asks(world, confirm_after,
                                                                         told):
    endpoint = make_endpoint(world.team, confirm_after=confirm_after)
    for hour, values in enumerate((GRADE_A, CAPPED_D, GRADE_A, CAPPED_D, GRADE_A)):
        scan_at(endpoint, NOW + timedelta(hours=hour), values)
    assert _kinds(endpoint) == told
