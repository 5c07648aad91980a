"""A fresh install's /benchmarks says how the page fills, and a cell that stays "—" although
hosts report says why: hosts of fewer than two operators never make a figure."""

from __future__ import annotations

import pytest

from accounts import teams
from tests.benchmarks.public.test_sparse import _page
from tests.conftest import make_user
from tests.helpers.network import make_catalog, make_host

pytestmark = pytest.mark.django_db


def test_a_fresh_install_says_how_the_page_fills(db):
    html, page = _page()
    assert page.banner
    text = " ".join(html.split())
    assert "adds models to the catalog" in text
    assert "hosts come online" in text and "jobs settle" in text


def test_dashes_beside_one_operators_hosts_say_two_operators_are_needed(db):
    operator = teams.create_team("solo-ops", "Solo Ops", owner=make_user("solo-ops"))
    make_catalog("alpha-q4", context_len=8192)
    for n in range(3):
        make_host(operator, f"box-{n}", "software", models=["alpha-q4"], ttft=90.0, tps=30.0)
    html, page = _page()
    row = next(r for r in page.cards["alpha-q4"]["tiers"] if r["attrs"]["data-tier"] == "software")
    assert row["cells"][1:] == ["3", "—", "—", "—"]
    text = " ".join(html.split())
    assert "only one operator's hosts report" in text
    assert "hosts of at least 2 operators" in text
