"""A status page's news as a real Celery worker delivers it (Redis broker, the real database,
mail written by Django's file backend): the confirmation mail of a subscription made on the
page, then an incident's public update, once each, to the confirmed address only."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from django.test import Client
from rest_framework.test import APIClient

from scans.status_pages.settings import page_of, save_settings
from tests.conftest import bearer
from tests.helpers import workers
from tests.helpers.factories import make_endpoint
from tests.helpers.processes import wait_for
from tests.helpers.workers import stop, worker_env
from tokvera_site.celery import app

pytestmark = [pytest.mark.redis, pytest.mark.django_db(transaction=True)]


def _mails(folder: Path) -> list[str]:
    return [p.read_text() for p in sorted(folder.glob("*.log"), key=lambda p: p.stat().st_mtime)]


def test_a_worker_mails_the_confirmation_then_a_public_update_once(world, tmp_path):
    app.control.purge()
    mail = tmp_path / "mail"
    mail.mkdir()
    status = page_of(world.team)
    shown = make_endpoint(world.team, name="internal name")
    save_settings(status, enabled=True, slug=status.slug, title="Acme status",
                  shown=[(shown, "Public API")])
    worker = workers.start(env=worker_env(DJANGO_SETTINGS_MODULE="tests.helpers.mail_capture_settings",
                                          TOKVERA_TEST_MAIL_DIR=str(mail)))
    try:
        Client().post(f"/status/{status.slug}/subscribe/", {"email": "v@example.org"},
                      REMOTE_ADDR="192.0.2.30")
        wait_for(lambda: len(_mails(mail)) == 1, 60, "the confirmation mail")
        link = re.search(r"(/status/\S+/confirm/\S+/)", _mails(mail)[0]).group(1)
        assert Client().get(link).status_code == 200

        token = bearer(world.read_write_token)
        made = APIClient().post("/api/v1/incidents/", {
            "title": "internal title", "endpoints": [str(shown.public_id)], "status": "identified",
            "text": "We found the cause.", "public": True}, format="json", **token)
        assert made.status_code == 201
        wait_for(lambda: len(_mails(mail)) == 2, 60, "the update's mail")
        update = _mails(mail)[1]
        assert "To: v@example.org" in update and "We found the cause." in update
        assert "Identified: Public API" in update
        assert "internal" not in update.split("\n\n", 1)[1]  # the body names only the page's names
        time.sleep(3)  # a duplicate would have arrived by now
    finally:
        stop(worker)
    assert len(_mails(mail)) == 2
