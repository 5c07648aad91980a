"""Team services: creating teams, roles, invitations and API tokens. Each owns its transaction."""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, overload

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.mail import send_mail
from django.db import models, transaction
from django.utils import timezone
from django.utils.text import slugify

from accounts import credentials, identity
from accounts.models import ApiToken, Invitation, Membership, Role, Team, TokenScope
from accounts.tenancy import Access
from accounts.validators import validate_one_line
from audit import record as audit

if TYPE_CHECKING:
    from django.contrib.auth.models import User


class TeamRuleError(ValueError):
    """A request that would break a team rule (e.g. leaving a team without an owner)."""


class NotTheInvitee(TeamRuleError):
    """An invitation used by an account whose email is not the invited address."""


def is_invitee(invitation: Invitation, user: User) -> bool:
    """Only the invited address may accept: a link forwarded, leaked or guessed from a log
    must not let another account (of any team) join, let alone with the invited role."""
    return (user.email or "").strip().lower() == invitation.email


def _one_line(label: str, value: str) -> None:
    try:
        validate_one_line(value)
    except ValidationError as exc:
        raise TeamRuleError(f"{label}: {exc.messages[0]}") from None


class TeamCapReached(TeamRuleError):
    """The account already owns or administers as many teams as one account may
    (TEAMS_PER_ACCOUNT)."""


def _refuse_past_cap(owner: User) -> None:
    """Each team has budgets of its own (pushed report bytes, job submissions): one account
    owns or administers at most TEAMS_PER_ACCOUNT teams, so making teams does not multiply
    them. Admins count too: an owner who hands ownership to a second account and stays admin
    keeps full use of the team. The account's row is locked first, so two creations at once
    are counted one after the other."""
    get_user_model().objects.select_for_update().filter(pk=owner.pk).first()
    cap = settings.TEAMS_PER_ACCOUNT
    held = owner.memberships.filter(role__in=(Role.OWNER, Role.ADMIN)).count()
    if held >= cap:
        raise TeamCapReached(
            f"You already own or administer {held} team{'s' if held != 1 else ''}, the most one "
            f"account may ({cap}): delete or leave one you no longer use, or ask to be invited "
            f"to an existing team.")


@transaction.atomic
def create_team(slug: str, name: str, owner: User) -> Team:
    _one_line("Team name", name)
    _refuse_past_cap(owner)
    team = Team.dangerously_unscoped.create(slug=slug, name=name or slug)  # no team yet: this makes it
    Membership.objects.for_team(team).create(team=team, user=owner, role=Role.OWNER)
    audit.created(team, user=owner)
    return team


def free_slug(name: str) -> str:
    """A slug for a new team from its name, made unique with a number if taken."""
    base = slugify(name)[:40].strip("-") or "team"
    slug, n = base, 2
    while Team.dangerously_unscoped.filter(slug=slug).exists():  # slugs are site-wide
        slug, n = f"{base}-{n}", n + 1
    return slug


def rename_team(team: Team, name: str) -> Team:
    """A new name; the slug (and every URL and badge link with it) stays."""
    name = name.strip()
    if not name:
        raise TeamRuleError("Team name: give the team a name.")
    _one_line("Team name", name)
    team.name = name[:100]
    with audit.track(team):
        team.save(update_fields=["name"])
    return team


def what_deleting_loses(team: Team) -> list[tuple[str, int]]:
    """What deleting the team deletes with it, as (what, how many), largest first: every row
    that cascades from the team, found from the models' relations (accounts knows nothing of
    the apps that hang their rows on a team), counted in SQL. A model reached along several
    paths (a delivery through its channel and through its alert) is counted once per row."""
    paths: dict[Any, list[str]] = {}
    for model, path in _cascade_paths(Team, "", set()):
        if model is not Team:
            paths.setdefault(model, []).append(path)
    counts: dict[str, int] = {}
    for model, found in paths.items():
        # Rows reached through the team's own relations: this team's rows only. Each path is
        # a chain of foreign keys to the team, so OR-ing them repeats no row.
        reached = models.Q()
        for path in found:
            reached |= models.Q(**{path: team})
        count = model._base_manager.filter(reached).count()
        if count:
            label = str(model._meta.verbose_name_plural)
            counts[label] = counts.get(label, 0) + count
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))


def _cascade_paths(model: Any, path: str, seen: set) -> list[tuple[Any, str]]:
    found = [(model, path or "pk")]
    seen = seen | {model}
    # Hidden relations too (related_name="+"): their rows go with the team all the same.
    relations = [f for f in model._meta.get_fields(include_hidden=True)
                 if f.auto_created and not f.concrete and (f.one_to_many or f.one_to_one)]
    for relation in relations:
        if (relation.on_delete is not models.CASCADE or relation.related_model in seen
                or relation.related_model._meta.auto_created):  # a many-to-many's own table
            continue
        # The lookup from the related model back to the team, e.g. "endpoint__team".
        step = relation.field.name
        found += _cascade_paths(relation.related_model, f"{step}__{path}" if path else step, seen)
    return found


@transaction.atomic
def delete_team(team: Team) -> None:
    Team.dangerously_unscoped.filter(pk=team.pk).delete()  # the team itself: its own row


def team_by_slug(slug: str) -> Team | None:
    """The team with this slug, or None: for commands given a slug before any team is known."""
    return Team.dangerously_unscoped.filter(slug=slug).first()  # the slug is the only key here


def lock_owners(team: Team) -> list[Membership]:
    # Locking the owner rows serialises two owners demoting each other at the same moment.
    return list(
        Membership.objects.for_team(team).select_for_update().filter(role=Role.OWNER)
    )


@transaction.atomic
def change_role(membership: Membership, new_role: str) -> Membership:
    if new_role not in Role.values:
        raise TeamRuleError(f"Unknown role {new_role!r}.")
    owners = lock_owners(membership.team)
    membership.refresh_from_db()
    if membership.role == Role.OWNER and new_role != Role.OWNER and len(owners) <= 1:
        raise TeamRuleError("The last owner cannot be demoted; make someone else owner first.")
    membership.role = new_role
    membership.from_sso = False  # a role the team set is the team's: sign-ons leave it alone
    with audit.track(membership):
        membership.save(update_fields=["role", "from_sso"])
    return membership


@transaction.atomic
def remove_member(membership: Membership) -> None:
    owners = lock_owners(membership.team)
    membership.refresh_from_db()
    if membership.role == Role.OWNER and len(owners) <= 1:
        raise TeamRuleError("The last owner cannot leave; make someone else owner first.")
    with audit.track(membership):
        membership.delete()


def _invite_hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def invite(team: Team, email: str, role: str, invited_by: User) -> tuple[Invitation, str]:
    """Create an invitation and email its link. Returns the invitation and the link."""
    if role not in Role.values:
        raise TeamRuleError(f"Unknown role {role!r}.")
    email = email.strip().lower()
    open_ = Invitation.objects.for_team(team).filter(email=email, accepted_at__isnull=True)
    if open_.filter(expires_at__gt=timezone.now()).exists():
        raise TeamRuleError(f"{email} already has an open invitation: resend it instead.")
    secret = secrets.token_urlsafe(32)
    invitation = Invitation.objects.for_team(team).create(
        team=team,
        email=email,
        role=role,
        secret_hash=_invite_hash(secret),
        invited_by=invited_by,
        expires_at=timezone.now() + timedelta(hours=settings.INVITE_MAX_AGE_HOURS),
    )
    audit.created(invitation)
    return invitation, _send_invitation(invitation, secret, invited_by)


def _send_invitation(invitation: Invitation, secret: str, invited_by: User) -> str:
    link = f"{settings.SITE_URL}/invites/{secret}/"
    send_mail(
        subject=f"You are invited to {invitation.team.name} on Tokvera",
        message=(
            f"{invited_by} invited you to join {invitation.team.name} as {invitation.role}.\n\n"
            f"Accept within {settings.INVITE_MAX_AGE_HOURS} hours: {link}\n"
            "The link works once."
        ),
        from_email=None,
        recipient_list=[invitation.email],
    )
    return link


@transaction.atomic
def resend_invitation(invitation: Invitation, sent_by: User) -> str:
    """A new link (the old one stops working: only its hash was kept) and a new expiry."""
    secret = secrets.token_urlsafe(32)
    invitation.secret_hash = _invite_hash(secret)
    invitation.expires_at = timezone.now() + timedelta(hours=settings.INVITE_MAX_AGE_HOURS)
    with audit.track(invitation):
        invitation.save(update_fields=["secret_hash", "expires_at"])
    return _send_invitation(invitation, secret, sent_by)


def revoke_invitation(invitation: Invitation) -> None:
    """The link stops working at once; an accepted invitation is history and stays."""
    with audit.track(invitation):
        Invitation.objects.for_team(invitation.team_id).filter(
            pk=invitation.pk, accepted_at__isnull=True
        ).delete()


def find_invitation(secret: str) -> Invitation | None:
    """The open invitation for this link, or None if it is unknown, used or expired."""
    return (
        # Found by the link's secret hash: whose team it is, is what this lookup learns.
        Invitation.dangerously_unscoped.select_related("team")
        .filter(
            secret_hash=_invite_hash(secret), accepted_at__isnull=True, expires_at__gt=timezone.now()
        )
        .first()
    )


@transaction.atomic
def accept_invitation(secret: str, user: User) -> Membership | None:
    """Use the link once: the conditional UPDATE's row count decides who wins a race."""
    invitation = find_invitation(secret)
    if invitation is None:
        return None
    if not is_invitee(invitation, user):
        raise NotTheInvitee(f"This invitation is for {invitation.email}, not {user.email or 'you'}.")
    claimed = Invitation.objects.for_team(invitation.team).filter(
        pk=invitation.pk, accepted_at__isnull=True
    ).update(accepted_at=timezone.now(), accepted_by=user)
    if not claimed:
        return None
    membership, created = Membership.objects.for_team(invitation.team).get_or_create(
        team=invitation.team, user=user, defaults={"role": invitation.role}
    )
    if created:
        audit.created(membership, user=user)
    elif membership.from_sso:  # invited as well: the membership is the team's from now on
        Membership.objects.for_team(invitation.team).filter(pk=membership.pk).update(from_sso=False)
    return membership


def issue_token(
    team: Team, scope: str, name: str = "", created_by: User | None = None,
    expires_at: datetime | None = None,
) -> tuple[ApiToken, str]:
    """Create an API token (never expiring, or refused from `expires_at` on); the returned
    secret is shown once and never stored."""
    if scope not in TokenScope.values:
        raise TeamRuleError(f"Unknown scope {scope!r}: expected read-only or read-write.")
    if expires_at is not None and expires_at <= timezone.now():
        raise TeamRuleError("Expiry: choose a time in the future.")
    _one_line("Token name", name)
    new = credentials.new_secret("tkv")
    token = ApiToken.objects.for_team(team).create(
        team=team,
        name=name or f"{scope} token",
        prefix=new.prefix,
        secret_hmac=new.digest,
        scope=scope,
        created_by=created_by,
        expires_at=expires_at,
    )
    audit.created(token)
    return token, new.token


def revoke_token(token: ApiToken) -> None:
    with audit.track(token):
        ApiToken.objects.for_team(token.team_id).filter(pk=token.pk, revoked_at__isnull=True).update(
            revoked_at=timezone.now()
        )


@overload
def user_by_email(email: str, create: Literal[True]) -> User: ...
@overload
def user_by_email(email: str, create: bool = False) -> User | None: ...


def user_by_email(email: str, create: bool = False) -> User | None:
    """The account of this address; with `create`, made (without a password) if there is none."""
    User = get_user_model()
    email = email.strip().lower()
    user = User.objects.filter(email__iexact=email).first()
    if user is None and create:
        user = User.objects.create_user(username=email, email=email)
        user.set_unusable_password()
        user.save()
        # Made for an invitation (whose link reached this mailbox) or by an operator.
        identity.vouch_for_email(user)
    return user


# --- which team a new object goes into (the page and the API ask the same way) -------------


class TeamChoiceError(Exception):
    """Why a new endpoint (or other team object) cannot be created in the team asked for."""


class TeamNotChosen(TeamChoiceError):
    """The caller belongs to several teams and named none."""


class NoSuchTeam(TeamChoiceError):
    """No team of the caller's has that slug (the same answer as for a team that does not exist)."""


class ReadOnlyInTeam(TeamChoiceError):
    """The caller may read the team but not write to it."""


def team_for_new_object(access: Access, slug: str | None) -> Team:
    """The team named by `slug` among the caller's teams or, with no slug, the caller's only
    team (a team token, or a user in one team); the caller must be able to write there."""
    visible = Team.objects.visible_to(access)
    if slug is not None:
        team = visible.filter(slug=slug).first()
    elif len(access.team_ids) == 1:
        team = visible.first()
    else:
        raise TeamNotChosen("say which team (its slug)")
    if team is None:
        raise NoSuchTeam("No such team.")
    if not access.can_write(team.pk):
        raise ReadOnlyInTeam("Your role in this team is read-only.")
    return team
