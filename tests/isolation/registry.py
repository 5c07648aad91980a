"""Every URL of the site, classified. A URL that is not listed here fails the isolation suite.

- PUBLIC: no login needed, no team data (tested in their own modules).
- ACCOUNT: login needed, but not owned by one team (home, whoami).
- HOST_TOKEN: called by network hosts with a host token (tested with the network).
- TEAM: team-owned; walked by test_every_team_url for every kind of caller.
Admin URLs (namespace `admin`) are staff-only and checked in test_admin_is_staff_only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from scans.models import ApiToken, Invitation, Membership, Role, Team

PUBLIC = {"login", "logout", "healthz", "site-metrics", "api-schema", "api-docs", "invite-accept"}
ACCOUNT = {"home", "api-whoami"}
HOST_TOKEN: set[str] = set()


@dataclass(frozen=True)
class Case:
    kind: str  # "page" or "api"
    method: str
    needs: str  # "read", "write" or "manage"
    kwargs: Callable = lambda w: {"slug": w.team.slug}
    data: Callable = lambda w: None
    ok: frozenset = field(default_factory=lambda: frozenset({200}))
    # For writes: did the request take effect? Asserted true for allowed callers, false otherwise.
    effect: Callable | None = None
    listing: bool = False  # a list: outsiders get 200 without the team's rows, not 404


def _membership(w, user) -> Membership:
    return Membership.dangerously_unscoped.get(team=w.team, user=user)


def _spare_token(w) -> ApiToken:
    from scans import teams

    token, _ = teams.issue_token(w.team, "read-only", name="spare")
    return token


TEAM: dict[str, list[Case]] = {
    "team-dashboard": [Case("page", "GET", "read")],
    "team-switch": [Case("page", "POST", "read", ok=frozenset({302}))],
    "team-members": [Case("page", "GET", "read")],
    "member-invite": [
        Case(
            "page", "POST", "manage",
            data=lambda w: {"email": "new.person@example.test", "role": "member"},
            ok=frozenset({302}),
            effect=lambda w: Invitation.dangerously_unscoped.filter(
                team=w.team, email="new.person@example.test").exists(),
        )
    ],
    "member-role": [
        Case(
            "page", "POST", "manage",
            kwargs=lambda w: {"slug": w.team.slug, "public_id": _membership(w, w.target).public_id},
            data=lambda w: {"role": "viewer"},
            ok=frozenset({302}),
            effect=lambda w: _membership(w, w.target).role == Role.VIEWER,
        )
    ],
    "member-remove": [
        Case(
            "page", "POST", "manage",
            kwargs=lambda w: {"slug": w.team.slug, "public_id": _membership(w, w.target).public_id},
            ok=frozenset({302}),
            effect=lambda w: not Membership.dangerously_unscoped.filter(
                team=w.team, user=w.target).exists(),
        )
    ],
    "team-tokens": [Case("page", "GET", "read")],
    "token-create": [
        Case(
            "page", "POST", "manage",
            data=lambda w: {"scope": "read-only", "name": "made-by-test"},
            effect=lambda w: ApiToken.dangerously_unscoped.filter(
                team=w.team, name="made-by-test").exists(),
        )
    ],
    "token-revoke": [
        Case(
            "page", "POST", "manage",
            kwargs=lambda w: {"slug": w.team.slug, "public_id": _spare_token(w).public_id},
            ok=frozenset({302}),
            effect=lambda w: ApiToken.dangerously_unscoped.get(
                team=w.team, name="spare").revoked_at is not None,
        )
    ],
    "api-team-list": [Case("api", "GET", "read", kwargs=lambda w: {}, listing=True)],
    "api-team-detail": [
        Case("api", "GET", "read"),
        Case(
            "api", "PATCH", "manage",
            data=lambda w: {"name": "Renamed Acme"},
            effect=lambda w: Team.dangerously_unscoped.get(pk=w.team.pk).name == "Renamed Acme",
        ),
    ],
}
