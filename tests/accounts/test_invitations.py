"""Invitations are accepted only by the invited address, and their secrets are never logged
."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
from django.core import mail
from django.test import Client
from django.urls import reverse

from accounts import teams
from accounts.models import Invitation, Membership, Role
from tests.conftest import database_url, free_port, make_user
from tests.helpers.paths import ROOT


def invite_link(world, email: str, role: str = Role.ADMIN) -> tuple[str, str]:
    """Invite through the members page; returns (the link's path, its secret)."""
    owner = Client()
    owner.force_login(world.owner)
    owner.post(reverse("member-invite", kwargs={"slug": world.team.slug}),
               {"email": email, "role": role})
    secret = re.search(r"/invites/([A-Za-z0-9_-]+)/", mail.outbox[-1].body).group(1)
    return reverse("invite-accept", kwargs={"secret": secret}), secret


@pytest.mark.django_db
def test_an_account_of_another_address_cannot_accept_an_invitation(world):
    url, _ = invite_link(world, "new-admin@example.test", role=Role.ADMIN)
    intruder = Client()
    intruder.force_login(world.outsider)  # the owner of another team, with its own email

    page = intruder.get(url)
    accepted = intruder.post(url)

    assert page.status_code == 403 and "This invitation is for someone else" in page.content.decode()
    assert accepted.status_code == 403
    assert not Membership.dangerously_unscoped.filter(team=world.team,
                                                      user=world.outsider).exists()
    assert Invitation.dangerously_unscoped.get(team=world.team).accepted_at is None


@pytest.mark.django_db
def test_the_invited_address_logged_in_accepts_it(world):
    invitee = make_user("invitee")
    url, _ = invite_link(world, invitee.email.upper(), role=Role.MEMBER)
    client = Client()
    client.force_login(invitee)

    response = client.post(url)

    assert response.status_code == 302
    assert Membership.dangerously_unscoped.get(team=world.team, user=invitee).role == Role.MEMBER


@pytest.mark.django_db
def test_the_service_refuses_another_account_too(world):
    invitation, link = teams.invite(world.team, "someone@example.test", Role.ADMIN, world.owner)
    secret = link.rsplit("/invites/", 1)[1].strip("/")
    with pytest.raises(teams.NotTheInvitee):
        teams.accept_invitation(secret, world.viewer)
    assert not Membership.dangerously_unscoped.filter(
        team=world.team, user__email="someone@example.test").exists()


@pytest.mark.django_db
@pytest.mark.parametrize("show", [False, True])
def test_the_console_email_masks_the_invitation_link_unless_allowed(world, settings, capsys,
                                                                    show):
    settings.EMAIL_BACKEND = "common.mail.ConsoleEmailBackend"
    settings.EMAIL_SHOW_SECRETS = show

    _, link = teams.invite(world.team, "someone@example.test", Role.MEMBER, world.owner)

    printed = capsys.readouterr().out
    assert "You are invited to Acme" in printed
    if show:
        assert link in printed
    else:
        assert link not in printed and link.rsplit("/", 2)[1] not in printed
        assert "/invites/[redacted]/" in printed


def _wait_for_port(port: int, process: subprocess.Popen) -> None:
    for _ in range(300):
        if process.poll() is not None:
            raise AssertionError("gunicorn exited: " + process.stdout.read())
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise AssertionError("gunicorn did not start")


@pytest.mark.django_db(transaction=True)
def test_gunicorns_access_log_never_shows_an_invitation_secret(world):
    _, secret = invite_link(world, "newcomer@example.test")
    port = free_port()
    env = {**os.environ, "DATABASE_URL": database_url(), "DEBUG": "1",
           "ALLOWED_HOSTS": "127.0.0.1"}
    process = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "tokvera_site.wsgi", "--bind", f"127.0.0.1:{port}",
         "--workers", "1", "--access-logfile", "-", "--error-logfile", "-"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        _wait_for_port(port, process)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/invites/{secret}/") as page:
            assert page.status == 200 and "Join Acme" in page.read().decode()
    finally:
        process.send_signal(signal.SIGTERM)
        log, _ = process.communicate(timeout=30)
    assert '"GET /invites/[redacted]/ HTTP/1.1" 200' in log
    assert secret not in log
