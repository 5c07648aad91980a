"""Single sign-on: one OpenID Connect provider the operator configures (settings.SSO_APP, read by
django-allauth's openid_connect provider), and what its claims make a user in each team.

- Signing in through it makes an account when the address is new (the provider vouches for it,
  whatever SIGNUP_OPEN says) and signs in the account that has the address otherwise.
- At each sign-in the claim settings.SSO_TEAMS_CLAIM (a list of group names, or one name) is
  read against settings.SSO_TEAM_ROLES (`value → (team slug, role)`): the user becomes a member
  of each team a value names, with the highest role its values give; a membership the provider
  gave goes when no value grants it any more. Memberships the team made itself (an invitation,
  a role an admin set) are the team's: the provider neither changes nor removes them. A team's
  last owner is never removed or demoted this way. A role the provider gave holds only in a
  session signed in through it (accounts.tenancy.Access): a password sign-in keeps none.
- A team that requires single sign-on (Team.require_sso) shows its pages to a member only in a
  session that signed in through the provider (accounts.tenancy.Access withholds it otherwise);
  API tokens are unaffected.
Each membership change is in the team's audit log, by the user who signed in.
"""

from __future__ import annotations

import logging
from typing import Any

from allauth.account.signals import user_logged_in
from allauth.socialaccount.adapter import DefaultSocialAccountAdapter
from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.dispatch import receiver
from django.http import HttpRequest

from accounts.models import Membership, Role, Team
from accounts.teams import lock_owners
from accounts.tenancy import SSO_PROVIDER_ID, signed_in_with_sso
from audit import record as audit

log = logging.getLogger(__name__)

__all__ = ["PROVIDER_ID", "SocialAccountAdapter", "granted_roles", "signed_in_with_sso",
           "sync_memberships"]

PROVIDER_ID = SSO_PROVIDER_ID
RANK = {Role.VIEWER: 0, Role.MEMBER: 1, Role.ADMIN: 2, Role.OWNER: 3}


class SocialAccountAdapter(DefaultSocialAccountAdapter):
    def is_open_for_signup(self, request: HttpRequest, sociallogin: Any) -> bool:
        # The operator's provider vouches for its people: sign-up by it is always open.
        return bool(settings.SSO_APP)


def _claim_values(claims: dict) -> list[str]:
    value = claims.get(settings.SSO_TEAMS_CLAIM)
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, str)]
    return []


def granted_roles(claims: dict) -> dict[str, str]:
    """Team slug → the highest role the claims grant there."""
    granted: dict[str, str] = {}
    for value in _claim_values(claims):
        if value not in settings.SSO_TEAM_ROLES:
            continue
        slug, role = settings.SSO_TEAM_ROLES[value]
        if slug not in granted or RANK[Role(role)] > RANK[Role(granted[slug])]:
            granted[slug] = role
    return granted


def _last_owner(membership: Membership) -> bool:
    return membership.role == Role.OWNER and not Membership.objects.for_team(
        membership.team_id).filter(role=Role.OWNER).exclude(pk=membership.pk).exists()


def sync_memberships(user: User, claims: dict) -> None:
    """Bring the user's provider-given memberships in line with `claims` (see the module)."""
    granted = granted_roles(claims)
    mapped_slugs = {slug for slug, _ in settings.SSO_TEAM_ROLES.values()}
    teams = {team.slug: team for team in Team.dangerously_unscoped  # the operator's map names them
             .filter(slug__in=mapped_slugs)}
    for slug in sorted(set(granted) - set(teams)):
        log.warning("single sign-on grants a role in team %r, which does not exist", slug)
    with transaction.atomic():
        for slug, team in teams.items():
            lock_owners(team)  # as a person's change of role does: the last owner stays
            membership = Membership.objects.for_team(team).filter(user=user).first()
            role = granted.get(slug)
            if membership is None:
                if role is not None:
                    made = Membership(team=team, user=user, role=role, from_sso=True)
                    with audit.track(made, user=user):
                        made.save()
            elif membership.from_sso and not _last_owner(membership):
                if role is None:
                    with audit.track(membership, user=user):
                        membership.delete()
                elif role != membership.role:
                    with audit.track(membership, user=user):
                        membership.role = role
                        membership.save(update_fields=["role"])


def _claims(sociallogin: Any) -> dict:
    data = sociallogin.account.extra_data or {}
    # The userinfo answer, then the ID token: a claim either carries counts.
    return {**(data.get("id_token") or {}), **(data.get("userinfo") or {})}


@receiver(user_logged_in)
def _on_sign_in(sender: object, request: HttpRequest, user: User,
                **kwargs: Any) -> None:
    sociallogin = kwargs.get("sociallogin")
    if sociallogin is None or sociallogin.account.provider != PROVIDER_ID:
        return
    sync_memberships(user, _claims(sociallogin))

