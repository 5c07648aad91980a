"""An SLO status only with enough data: no "breaching" or "at risk" until the burn
pair that would call it has half of its long span covered; before that the window says "too
little data yet: N of M covered". Each status and each pair is explained in plain words beside
the SRE terms, on the endpoint page and in the API."""

from __future__ import annotations

import html
from datetime import timedelta

import pytest
from django.utils import timezone

from scans.history import slo_windows
from scans.history.slo_wording import WindowWords
from tests.conftest import bearer
from tests.helpers.factories import make_endpoint
from tests.scans.conftest import CAPPED_D, GRADE_A, NOW, scan_at, with_values

pytestmark = pytest.mark.django_db

MINUTE, HOUR = timedelta(minutes=1), timedelta(hours=1)
SLOW_FIRST_TOKEN = with_values(GRADE_A, ttft_p95_at_concurrency_1=900.0)


def _every_5_min(endpoint, values, minutes: int, now=NOW):
    for m in range(minutes, 0, -5):
        scan_at(endpoint, now - m * MINUTE, values)


def test_four_minutes_of_bad_scans_are_too_little_data_not_breaching(world):
    # the demo row: "up · A · breaching" after 4 minutes of data
    endpoint = make_endpoint(world.team, slo_grade_floor="B", slo_objective=0.99,
                             interval_minutes=5)
    scan_at(endpoint, NOW - 4 * MINUTE, CAPPED_D)

    window = slo_windows.window(endpoint, 7, now=NOW)

    assert window.status == "no_data" and window.alert_level == ""
    assert WindowWords(window).status_label == "too little data yet"
    # at 99 % the 1 h pair can fire: it needs half of its hour covered
    assert WindowWords(window).status_reason == (
        "too little data yet: 4 min of 30 min covered, 0.0% of it good so far")


def test_a_ninety_percent_objective_waits_for_the_pair_that_can_page(world):
    # at 90 % the highest rate is 10x: the 1 h pair (14.4x) never fires, the 6 h one (6x) can,
    # once 3 h of its 6 are covered
    endpoint = make_endpoint(world.team, slo_ttft_p95_ms=500, slo_grade_floor="F",
                             slo_objective=0.9, interval_minutes=5)
    _every_5_min(endpoint, SLOW_FIRST_TOKEN, 40)

    early = slo_windows.window(endpoint, 7, now=NOW)
    assert early.status == "no_data" and early.alert_level == ""
    assert WindowWords(early).status_reason == (
        "too little data yet: 40 min of 3 h covered, 0.0% of it good so far")
    waiting = {w["label"]: w for w in WindowWords(early).alert_windows}["6 h and 30 min"]
    assert not waiting["firing"] and waiting["waiting"]
    assert waiting["waiting_text"] == "not yet: 40 min of the 3 h of the last 6 h it needs covered"

    later_now = NOW + 2 * HOUR + 20 * MINUTE
    for m in range(0, 140, 5):
        scan_at(endpoint, NOW + m * MINUTE, SLOW_FIRST_TOKEN)
    later = slo_windows.window(endpoint, 7, now=later_now)
    assert later.covered_s == 3 * 3600 and later.status == "breaching"
    assert later.alert_level == "page"


def test_a_healthy_new_endpoint_says_how_much_more_it_needs(world):
    endpoint = make_endpoint(world.team, interval_minutes=5)
    _every_5_min(endpoint, GRADE_A, 15)

    window = slo_windows.window(endpoint, 7, now=NOW)

    assert window.status == "no_data" and WindowWords(window).status_label == "too little data yet"
    assert WindowWords(window).status_reason == (
        "too little data yet: 15 min of 1 h covered, nothing wrong in it")


def test_each_status_is_said_in_plain_words_beside_its_term(world, owner_client):
    endpoint = make_endpoint(world.team, slo_ttft_p95_ms=500, slo_grade_floor="F",
                             slo_objective=0.9, interval_minutes=60)
    now = timezone.now()
    for h in range(4, 0, -1):
        scan_at(endpoint, now - h * HOUR, SLOW_FIRST_TOKEN)

    window = slo_windows.window(endpoint, 7, now=now)

    assert window.status == "breaching"
    assert WindowWords(window).status_meaning == (
        "the error budget is being spent 10 times as fast as the objective allows: at this "
        "pace the 7 days' budget is gone in 16 h 48 min; someone should look now")
    pair = {w["label"]: w for w in WindowWords(window).alert_windows}["6 h and 30 min"]
    body = owner_client.get(f"/endpoints/{endpoint.public_id}/").content.decode()
    assert f"Breaching: {WindowWords(window).status_meaning}." in html.unescape(body)  # beside the term
    assert pair["meaning"] == ("page (someone should look now) when the last 6 h and the last "
                               "30 min both spend the budget at least 6 times as fast as the "
                               "objective allows")


def test_the_page_and_the_api_say_too_little_data_and_explain_the_status(world, owner_client, api):
    endpoint = make_endpoint(world.team, slo_grade_floor="B", slo_objective=0.99,
                             interval_minutes=5)
    scan_at(endpoint, timezone.now() - 4 * MINUTE, CAPPED_D)

    body = owner_client.get(f"/endpoints/{endpoint.public_id}/").content.decode()
    assert 'data-slo="breaching"' not in body
    assert "too little data yet: 4 min of 30 min covered" in body.lower()
    assert "data-pair-meaning" in body  # each pair in plain words

    answer = api.get(f"/api/v1/endpoints/{endpoint.public_id}/slo",
                     **bearer(world.read_only_token)).json()
    seven = answer["windows"][0]
    assert seven["status"] == "no_data" and seven["status_label"] == "too little data yet"
    assert seven["reason"].startswith("too little data yet: 4 min of 30 min covered")
    assert seven["meaning"] and all(w["meaning"] for w in seven["alert_windows"])
    assert seven["judged_after_s"] == 1800
