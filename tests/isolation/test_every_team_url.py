"""Tenant isolation, walked over every URL the site serves.

Each team-owned URL is requested by every kind of caller. Outsiders (another team's user or
token) get 404 and none of the team's data; viewers and read-only tokens get 403 on writes;
anonymous callers get a login redirect (pages) or 401 (API); and a write that is refused
changes nothing.
"""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, reverse
from rest_framework.test import APIClient

from tests.conftest import bearer, build_world
from tests.isolation.registry import ACCOUNT, HOST_TOKEN, PUBLIC, TEAM

CALLERS = [
    "owner", "admin", "member", "viewer", "outsider", "anonymous",
    "read_only_token", "read_write_token", "other_team_token",
]
ROLE_ALLOWS = {
    "owner": {"read", "write", "channels", "manage", "own"},
    "admin": {"read", "write", "channels", "manage"},
    "member": {"read", "write"},  # an editor
    "viewer": {"read"},
    "read_only_token": {"read"},
    # A token never manages people or tokens; an admin made it, so it may change channels.
    "read_write_token": {"read", "write", "channels"},
}


def _all_url_names(patterns=None, namespace=None) -> list[tuple[str | None, str]]:
    """(namespace, name) of every URL pattern, recursively; unnamed patterns as (ns, None),
    except a redirect to a named one (allauth's old addresses): it is classified as its target."""
    found = []
    for entry in patterns if patterns is not None else get_resolver().url_patterns:
        if isinstance(entry, URLResolver):
            found += _all_url_names(entry.url_patterns, entry.namespace or namespace)
        elif isinstance(entry, URLPattern):
            target = getattr(getattr(entry.callback, "view_class", None), "pattern_name", None)
            redirect = (getattr(entry.callback, "view_initkwargs", {}) or {}).get("pattern_name")
            found.append((namespace, entry.name or redirect or target))
    return found


def test_every_url_is_classified():
    unclassified = []
    for namespace, name in _all_url_names():
        if namespace == "admin":
            continue
        if name is None or name not in PUBLIC | ACCOUNT | HOST_TOKEN | set(TEAM):
            unclassified.append(name or "<unnamed pattern>")
    assert not unclassified, (
        f"URLs missing from tests/isolation/registry.py: {sorted(set(unclassified))}. "
        "Add a Case for every team-owned URL (or list it as public/account/host-token)."
    )


def test_registry_lists_no_url_that_does_not_exist():
    names = {name for _, name in _all_url_names()}
    assert set(TEAM) | PUBLIC | ACCOUNT | HOST_TOKEN <= names


def _client_for(world, caller, kind):
    client = APIClient() if kind == "api" else Client()
    headers = {}
    if caller in ROLE_ALLOWS and not caller.endswith("_token") or caller == "outsider":
        client.force_login(world.user(caller))
    elif caller.endswith("_token"):
        headers = bearer(getattr(world, caller))
    return client, headers


def _expected(case, caller) -> str:
    """'ok', 'forbidden', 'not_found', 'login' or 'unauthorized'."""
    token_caller = caller.endswith("_token")
    if caller == "anonymous" or (case.kind == "page" and token_caller):
        return "login" if case.kind == "page" else "unauthorized"
    if caller in ("outsider", "other_team_token"):
        return "ok" if case.listing else "not_found"
    return "ok" if case.needs in ROLE_ALLOWS[caller] else "forbidden"


CASES = [
    pytest.param(name, index, caller, id=f"{name}[{case.method}]-{caller}")
    for name, cases in TEAM.items()
    for index, case in enumerate(cases)
    for caller in CALLERS
]


@pytest.mark.django_db
@pytest.mark.parametrize(("name", "index", "caller"), CASES)
def test_every_team_url(name, index, caller):
    world = build_world()
    case = TEAM[name][index]
    url = reverse(name, kwargs=case.kwargs(world)) + case.query
    client, headers = _client_for(world, caller, case.kind)
    data = case.data(world)
    send = getattr(client, case.method.lower())
    if case.kind == "api":
        response = send(url, data=data, format="json", **headers)
    else:
        response = send(url, data=data or {}, **headers)
    expected = _expected(case, caller)
    body = response.content.decode(errors="replace")

    if expected == "ok":
        assert response.status_code in case.ok, (response.status_code, body[:300])
        if case.listing and caller in ("outsider", "other_team_token"):
            assert world.team.slug not in body
        elif case.listing:
            assert world.team.slug in body  # the list shows the team's own rows
    elif expected == "forbidden":
        assert response.status_code == 403, (response.status_code, body[:300])
    elif expected == "not_found":
        assert response.status_code == 404, (response.status_code, body[:300])
    elif expected == "login":
        assert response.status_code == 302
        assert response["Location"].startswith(reverse("account_login"))
    else:
        assert response.status_code == 401, (response.status_code, body[:300])
        assert response.json()["detail"]

    if expected != "ok":
        assert world.team.name not in body  # not even the name leaks
    if case.effect is not None:
        assert case.effect(world) is (expected == "ok")


@pytest.mark.django_db
def test_admin_is_staff_only(world):
    client = Client()
    client.force_login(world.owner)  # a team owner is not site staff
    response = client.get(reverse("admin:accounts_team_changelist"))
    assert response.status_code == 302
    assert "/admin/login/" in response["Location"]
