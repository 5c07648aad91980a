"""The bytes of pushed reports are budgeted per account as well as per team: a fresh team has a
fresh team budget, but the account that made its token (or the user who pushes) has spent its own
already. Real test server, PostgreSQL and Redis; proofs run eagerly (what they decide is tested in
test_pushed_reports.py, how they are queued in test_push_fairness.py)."""

from __future__ import annotations

import json

import pytest
from django.test import override_settings
from django.urls import reverse

from accounts import teams
from scans.models import Scan
from tests.conftest import bearer, clear_cache
from tests.helpers.factories import make_endpoint, measured_report

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("eager_tasks")]


def _push(api, endpoint, token: str, variant: int):
    """A report of the endpoint's origin; `variant` trailing spaces make each a new upload."""
    report = measured_report()
    report["target"]["base_url"] = endpoint.base_url
    body = json.dumps(report).encode() + b" " * variant
    return api.post(reverse("api-endpoint-reports", kwargs={"public_id": endpoint.public_id}),
                    data=body, content_type="application/json", **bearer(token))


def test_fresh_teams_of_one_account_share_its_bytes_per_hour(world, api):
    clear_cache()  # the counters are keyed by ids, which start again in each test database
    first = make_endpoint(world.team, mode="pushed")
    fresh_team = teams.create_team(f"fresh-{world.team.slug}", "Fresh", owner=world.owner)
    fresh = make_endpoint(fresh_team, mode="pushed")
    elsewhere = make_endpoint(world.other_team, mode="pushed")
    first_token = teams.issue_token(world.team, "read-write", created_by=world.owner)[1]
    fresh_token = teams.issue_token(fresh_team, "read-write", created_by=world.owner)[1]
    other_token = teams.issue_token(world.other_team, "read-write", created_by=world.outsider)[1]
    one = len(json.dumps(measured_report()).encode())

    with override_settings(REPORT_TEAM_BYTES=one * 100, REPORT_ACCOUNT_BYTES=int(one * 1.5),
                           REPORT_ACCOUNT_BYTES_WINDOW_S=900):
        assert _push(api, first, first_token, 1).status_code == 202
        refused = _push(api, fresh, fresh_token, 2)
        another_account = _push(api, elsewhere, other_token, 3)

    assert refused.status_code == 429, refused.json()
    assert 1 <= int(refused["Retry-After"]) <= 900
    assert (f"at most {int(one * 1.5)} bytes of pushed reports per 900 s for one account"
            in refused.json()["detail"])
    assert not Scan.dangerously_unscoped.filter(endpoint=fresh).exists()
    assert another_account.status_code == 202
