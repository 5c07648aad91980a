"""A team's SLA report for a month or a range of days: availability of the covered time, down
time, time nobody measured, maintenance left out, SLO attainment and error budget spent, the
grade distribution and the incidents with their durations, per endpoint and for the team; as
a page, CSV, PDF and API, each saying the same figures, and a clear refusal of a bad range."""

from __future__ import annotations

import csv
import io
from datetime import UTC, date, datetime, timedelta

import pytest
from django.urls import reverse

from scans import sla
from scans.models import MaintenanceKind, MaintenanceWindow, Scan
from tests.conftest import bearer
from tests.helpers.factories import make_endpoint
from tests.scans.conftest import CAPPED_D, GRADE_A, GRADE_B, scan_at

pytestmark = pytest.mark.django_db

NOV = datetime(2026, 11, 1, tzinfo=UTC)
HOUR = timedelta(hours=1)


def _down_at(endpoint, when) -> Scan:
    scan = scan_at(endpoint, when, GRADE_A)
    Scan.dangerously_unscoped.filter(pk=scan.pk).update(down=True, grade="", points=None,
                                                        uncapped_grade="")
    return scan


def _november(world):
    """Two endpoints scanned hourly on November 10 (interval 60 min):
    - "chat": 20 A, 2 down in a row (one incident of 2 h), 2 B; a maintenance window of 2 h
      on the same day, in which no scan stands;
    - "embed": 24 scans, the last 12 below its floor (D): bad SLO time, never down."""
    chat = make_endpoint(world.team, name="chat", slo_objective=0.9)
    embed = make_endpoint(world.team, name="embed", slo_objective=0.99)
    day = NOV + timedelta(days=9)
    for hour in range(24):
        when = day + hour * HOUR
        if hour in (5, 6):
            _down_at(chat, when)
        elif hour in (20, 21):
            pass  # maintenance: no scan
        elif hour in (22, 23):
            scan_at(chat, when, GRADE_B)
        else:
            scan_at(chat, when, GRADE_A)
        scan_at(embed, when, CAPPED_D if hour >= 12 else GRADE_A)
    MaintenanceWindow.dangerously_unscoped.create(
        team=world.team, endpoint=chat, name="upgrade", kind=MaintenanceKind.ONCE,
        starts_at=day + 20 * HOUR, ends_at=day + 22 * HOUR, timezone="UTC")
    return chat, embed


def test_a_months_report_says_what_was_measured_per_endpoint_and_for_the_team(world):
    chat, embed = _november(world)

    report = sla.sla_report([chat, embed], date(2026, 11, 1), date(2026, 12, 1),
                            now=datetime(2026, 12, 3, tzinfo=UTC))

    assert report.title == "November 2026" and not report.partial
    lines = {line.endpoint.name: line for line in report.endpoints}
    c, e = lines["chat"], lines["embed"]
    assert c.range_s == 30 * 86400
    assert c.maintenance_s == 2 * 3600  # left out of everything
    assert c.covered_s == 22 * 3600 and c.down_s == 2 * 3600
    assert c.availability == pytest.approx(20 / 22)
    assert c.uncovered_s == 30 * 86400 - 24 * 3600  # the rest of the month: no data
    assert c.grades == {"A": 18, "B": 2} and c.down_scans == 2
    assert len(c.incidents) == 1 and c.incident_s == 2 * 3600
    # The SLO (floor B): the 2 down hours are bad; 20 of the 22 covered hours met it.
    assert c.attainment == pytest.approx(20 / 22) and c.met is True  # objective 0.9
    assert c.budget_s == pytest.approx(0.1 * (30 * 86400 - 2 * 3600))
    assert c.budget_spent == pytest.approx(2 * 3600 / c.budget_s)
    # embed: up all day, but half of it below its floor.
    assert e.availability == 1.0 and e.incidents == ()
    assert e.attainment == pytest.approx(0.5) and e.met is False
    assert e.grades == {"A": 12, "D": 12}
    team = report.team
    assert team.covered_s == 46 * 3600 and team.down_s == 2 * 3600
    assert team.availability == pytest.approx(44 / 46)
    assert team.grades["A"] == 30 and len(team.incidents) == 1


def test_the_page_csv_pdf_and_api_say_the_same_figures(world, owner_client, api):
    chat, _ = _november(world)
    query = {"month": "2026-11"}
    page = owner_client.get(reverse("team-sla", args=[world.team.slug]), query)
    assert page.status_code == 200
    text = page.content.decode()
    assert "SLA report: November 2026" in text
    assert f'data-endpoint="{chat.public_id}"' in text and "data-team-total" in text
    assert "90.9" in text  # chat's availability, 20 of 22 hours
    assert "A ×18, B ×2, down ×2" in text

    rows = list(csv.DictReader(io.StringIO(owner_client.get(
        reverse("team-sla", args=[world.team.slug]), {**query, "format": "csv"}
    ).content.decode())))
    assert [r["endpoint"] for r in rows] == ["chat", "embed", f"{world.team.name} (team)"]
    assert float(rows[0]["availability"]) == pytest.approx(20 / 22, abs=1e-6)
    assert rows[0]["down_s"] == "7200" and rows[0]["maintenance_s"] == "7200"
    assert rows[0]["incidents"] == "1" and rows[1]["slo_met"] == "false"

    pdf = owner_client.get(reverse("team-sla", args=[world.team.slug]), {**query, "format": "pdf"})
    assert pdf["Content-Type"] == "application/pdf"
    assert pdf.content.startswith(b"%PDF-") and b"/Type /Page" in pdf.content
    assert "attachment" in pdf["Content-Disposition"]

    answer = api.get(reverse("api-sla", args=[world.team.slug]), query, **bearer(world.read_only_token))
    assert answer.status_code == 200
    body = answer.json()
    assert (body["from"], body["to"], body["partial"]) == ("2026-11-01", "2026-11-30", False)
    by_name = {line["name"]: line for line in body["endpoints"]}
    assert by_name["chat"]["availability"] == pytest.approx(20 / 22)
    assert by_name["chat"]["incidents"][0]["duration_s"] == 7200
    assert body["team_totals"]["down_scans"] == 2
    api_csv = api.get(reverse("api-sla-csv", args=[world.team.slug]), query, **bearer(world.read_only_token))
    assert api_csv.status_code == 200 and api_csv.content.decode().startswith("endpoint,")


@pytest.mark.parametrize("query, words", [
    ({"month": "2026-13"}, "expected YYYY-MM"),
    ({"since": "2026-11-30", "until": "2026-11-01"}, "ends before it starts"),
    ({"since": "2020-01-01", "until": "2026-11-01"}, "at most 367 days"),
    ({"month": "2026-11", "since": "2026-11-01"}, "not both"),
])
def test_a_bad_range_is_refused_in_words(world, owner_client, api, query, words):
    page = owner_client.get(reverse("team-sla", args=[world.team.slug]), query)
    assert page.status_code == 400 and words in page.content.decode()
    answer = api.get(reverse("api-sla", args=[world.team.slug]), query, **bearer(world.read_only_token))
    # Well formed, but not a range to report: a 422 (a malformed month would be a 400).
    assert answer.status_code in (400, 422) and words in str(answer.json())


def test_the_current_month_is_reported_up_to_now(world):
    endpoint = make_endpoint(world.team)
    now = datetime(2026, 12, 3, 12, tzinfo=UTC)
    scan_at(endpoint, now - 2 * HOUR, GRADE_A)
    report = sla.sla_report([endpoint], date(2026, 12, 1), date(2027, 1, 1), now=now)
    assert report.partial and report.until == now
    (line,) = report.endpoints
    assert line.range_s == (now - datetime(2026, 12, 1, tzinfo=UTC)).total_seconds()
    # A scan stands for at most its interval (an hour): the hour since is no data.
    assert line.covered_s == 3600 and line.availability == 1.0
    assert line.uncovered_s == line.range_s - 3600
