"""Navigation: one link per destination, named for where it goes (two links named
"Dashboard" went to different pages, and the team compare page had no link)."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from tests.helpers.factories import make_endpoint

pytestmark = pytest.mark.django_db


def _links(html: str) -> list[tuple[str, str]]:
    return [
        (href, re.sub(r"<[^>]+>", "", text).strip())
        for href, text in re.findall(r'<a [^>]*href="([^"]+)"[^>]*>(.*?)</a>', html, re.S)
    ]


def test_each_nav_name_goes_to_one_page_and_compare_is_linked(world, owner_client):
    html = owner_client.get(reverse("team-dashboard", args=[world.team.slug])).content.decode()
    nav = html[html.index("<header") : html.index("</header>")] if "<header" in html else html
    targets: dict[str, set[str]] = {}
    for href, text in _links(nav + html[html.index('class="subnav"') :][:2000]):
        targets.setdefault(text, set()).add(href)
    assert all(len(hrefs) == 1 for hrefs in targets.values()), targets
    assert reverse("endpoints-compare", args=[world.team.slug]) in targets.get("Compare", set())


def test_the_team_compare_page_starts_with_two_different_endpoints(world, owner_client):
    first = make_endpoint(world.team, name="a first")
    second = make_endpoint(world.team, name="b second")
    html = owner_client.get(reverse("endpoints-compare", args=[world.team.slug])).content.decode()
    left = re.search(r'<select name="a">(.*?)</select>', html, re.S)[1]
    right = re.search(r'<select name="b">(.*?)</select>', html, re.S)[1]
    chosen_left = re.search(r'value="([^"]+)" selected', left)
    chosen_right = re.search(r'value="([^"]+)" selected', right)
    # A select shows its first option when none is chosen: the left one is the first endpoint.
    assert (chosen_left[1] if chosen_left else str(first.public_id)) == str(first.public_id)
    assert chosen_right is not None and chosen_right[1] == str(second.public_id)
