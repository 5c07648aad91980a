"""Who a person is: the email address the site knows is theirs, and their profile.

Accounts made by self sign-up prove their address by the verification mail (allauth). Accounts
the site makes itself (an invitation accepted: the link came to that mailbox; an operator's
`createteam --owner EMAIL`; the demo) have their address recorded as verified here, or
allauth's mandatory verification would stop them at the login.
"""

from __future__ import annotations

from allauth.account.models import EmailAddress

from accounts.models import Profile


def vouch_for_email(user) -> None:
    """Record the user's email as their verified, primary address."""
    if not user.email:
        return
    EmailAddress.objects.update_or_create(
        user=user,
        email__iexact=user.email,
        defaults={"email": user.email.lower(), "verified": True, "primary": True},
    )


def has_verified_email(user, email: str) -> bool:
    """Whether `email` is an address of the user's that has been proven theirs."""
    return EmailAddress.objects.filter(user=user, email__iexact=email.strip(), verified=True).exists()


def profile_of(user) -> Profile:
    profile, _ = Profile.objects.get_or_create(user=user)
    return profile


def display_name(user) -> str:
    """The name the user chose, else their email (or username)."""
    name = Profile.objects.filter(user_id=user.pk).values_list("name", flat=True).first()
    return name or user.email or user.get_username()
