"""Status page subscriptions, through the real public URLs: an address gets one confirmation
mail and nothing else until it confirms; the link works once and not when expired or tampered
with; an incident on a shown endpoint mails each confirmed subscriber once (with a one-click
unsubscribe link and header), one on an endpoint the page does not show mails nobody; a
maintenance window created for a shown endpoint mails once; the form answers the same whatever
happened (limits, honeypot, already subscribed); the Atom feed names only what the page shows;
the team sees a count, never an address. Mail goes through Django's locmem backend; the Celery
task's body is called in place of a worker."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from datetime import timedelta

import pytest
import time_machine
from django.core import mail
from django.test import Client
from django.utils import timezone

from scans.models import MaintenanceWindow, Scan, StatusPageSubscriber
from scans.notify import alerts
from scans.status_pages import subscriptions
from scans.status_pages.settings import page_of, save_settings
from tests.conftest import bearer, clear_cache
from tests.helpers.factories import make_endpoint
from tests.scans.conftest import GRADE_A, scan_at

pytestmark = pytest.mark.django_db

REAL_NAME = "prod llama internal"
REAL_URL = "http://10.9.8.7:8000/v1"
ATOM = "{http://www.w3.org/2005/Atom}"
SAME_ANSWER = "If this address can be subscribed"


@pytest.fixture(autouse=True)
def _fresh_cache():
    clear_cache()
    yield
    clear_cache()


@pytest.fixture(autouse=True)
def _task_runs_in_place(monkeypatch):
    """The task's body runs where it is queued (no worker): what a worker would do."""
    monkeypatch.setattr(subscriptions.mail_status_page_news, "delay",
                        lambda *args: subscriptions.mail_status_page_news(*args))


@pytest.fixture
def shown(world):
    return make_endpoint(world.team, name=REAL_NAME, base_url=REAL_URL, alert_email=False)


@pytest.fixture
def page(world, shown):
    page = page_of(world.team)
    return save_settings(page, enabled=True, slug=page.slug, title="Acme status",
                         shown=[(shown, "Public API")])


def _down_at(endpoint, when) -> Scan:
    """A stored down scan at `when` (what a dead port gives: no grade, `down`)."""
    scan = scan_at(endpoint, when, GRADE_A)
    Scan.dangerously_unscoped.filter(pk=scan.pk).update(down=True, grade="", points=None, uncapped_grade="")
    scan.refresh_from_db()
    return scan


def _subscribe(page, email, address="192.0.2.10", **extra):
    return Client().post(f"/status/{page.slug}/subscribe/", {"email": email, **extra},
                         REMOTE_ADDR=address)


def _mails_to(email) -> list:
    return [m for m in mail.outbox if m.to == [email]]


def _link(message, kind) -> str:
    return re.search(rf"https?://\S+?(/status/[a-z0-9-]+/{kind}/\S+/)", message.body).group(1)


def _confirmed(page, email, django_capture_on_commit_callbacks, address="192.0.2.20"):
    with django_capture_on_commit_callbacks(execute=True):
        _subscribe(page, email, address)
    assert Client().get(_link(_mails_to(email)[-1], "confirm")).status_code == 200


def test_subscribing_sends_one_confirmation_and_nothing_else_to_the_unconfirmed(
        page, shown, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        answer = _subscribe(page, "Visitor@Example.org")
    assert answer.status_code == 200 and SAME_ANSWER in answer.content.decode()
    (confirmation,) = mail.outbox
    assert confirmation.to == ["Visitor@Example.org"]
    assert "/confirm/" in confirmation.body
    assert "/unsubscribe/" in confirmation.extra_headers["List-Unsubscribe"]
    stored = StatusPageSubscriber.dangerously_unscoped.get(status_page=page)
    assert stored.email == "Visitor@Example.org" and stored.confirmed_at is None
    assert stored.token_hash and stored.token_hash not in confirmation.body  # hashed at rest

    now = timezone.now()
    scan_at(shown, now - timedelta(hours=2), GRADE_A)
    with django_capture_on_commit_callbacks(execute=True):
        alerts.after_scan(_down_at(shown, now - timedelta(hours=1)))
    assert len(mail.outbox) == 1  # not confirmed: no news


def test_the_confirmation_link_works_once_and_not_expired_or_tampered(
        page, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        _subscribe(page, "a@example.org")
        _subscribe(page, "late@example.org")
    link = _link(_mails_to("a@example.org")[0], "confirm")
    tampered = link[:-3] + ("A" if link[-3] != "A" else "B") + link[-2:]
    assert Client().get(tampered).status_code == 404
    assert Client().get(link.replace("/confirm/", "/confirm/x")).status_code == 404
    assert Client().get(link).status_code == 200
    assert Client().get(link).status_code == 404  # once
    late = _link(_mails_to("late@example.org")[0], "confirm")
    with time_machine.travel(timezone.now() + timedelta(seconds=subscriptions.CONFIRM_MAX_AGE_S + 60)):
        assert Client().get(late).status_code == 404
    confirmed = StatusPageSubscriber.dangerously_unscoped.filter(status_page=page, confirmed_at__isnull=False)
    assert [s.email for s in confirmed] == ["a@example.org"]


def test_an_incident_on_a_shown_endpoint_mails_each_confirmed_subscriber_once(
        world, page, shown, django_capture_on_commit_callbacks):
    for email in ("one@example.org", "two@example.org"):
        _confirmed(page, email, django_capture_on_commit_callbacks)
    hidden = make_endpoint(world.team, name="not on the page", alert_email=False)
    mail.outbox.clear()
    now = timezone.now()
    for endpoint in (shown, hidden):
        scan_at(endpoint, now - timedelta(hours=3), GRADE_A)
    with django_capture_on_commit_callbacks(execute=True):
        alerts.after_scan(_down_at(hidden, now - timedelta(hours=2)))
    assert mail.outbox == []  # not on the page: nobody hears of it

    with django_capture_on_commit_callbacks(execute=True):
        alerts.after_scan(_down_at(shown, now - timedelta(hours=2)))
    assert sorted(m.to[0] for m in mail.outbox) == ["one@example.org", "two@example.org"]
    for message in mail.outbox:
        assert "Public API is down" in message.subject
        assert REAL_NAME not in message.body + message.subject and REAL_URL not in message.body
        assert _link(message, "unsubscribe") in message.extra_headers["List-Unsubscribe"]
        assert message.extra_headers["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"

    mail.outbox.clear()
    with django_capture_on_commit_callbacks(execute=True):
        alerts.after_scan(scan_at(shown, now - timedelta(hours=1), GRADE_A))
    assert sorted(m.to[0] for m in mail.outbox) == ["one@example.org", "two@example.org"]
    assert all("up again" in m.subject for m in mail.outbox)


def test_a_maintenance_window_created_for_a_shown_endpoint_mails_once(
        world, page, shown, api, django_capture_on_commit_callbacks):
    _confirmed(page, "ops@example.org", django_capture_on_commit_callbacks)
    mail.outbox.clear()
    now = timezone.now()
    with django_capture_on_commit_callbacks(execute=True):
        made = api.post("/api/v1/maintenance-windows/", {
            "name": "driver upgrade for client X", "endpoint": str(shown.public_id), "kind": "once",
            "starts_at": (now + timedelta(hours=1)).isoformat(),
            "ends_at": (now + timedelta(hours=2)).isoformat()},
            format="json", **bearer(world.read_write_token))
    assert made.status_code == 201, made.content
    (message,) = mail.outbox
    assert message.to == ["ops@example.org"] and "Maintenance planned: Public API" in message.subject
    assert "client X" not in message.body  # the window's own name is the team's wording
    assert MaintenanceWindow.dangerously_unscoped.filter(team=world.team).count() == 1


def test_unsubscribing_takes_one_click_and_stops_the_mails(page, shown, django_capture_on_commit_callbacks):
    _confirmed(page, "bye@example.org", django_capture_on_commit_callbacks)
    link = _link(_mails_to("bye@example.org")[0], "unsubscribe")
    # A plain visit (a link scanner) only asks; the one click (or the mail client's RFC 8058 POST)
    # unsubscribes, with no cookie or CSRF token.
    assert Client().get(link).status_code == 200
    assert StatusPageSubscriber.dangerously_unscoped.filter(status_page=page).exists()
    assert Client(enforce_csrf_checks=True).post(link).status_code == 200
    assert not StatusPageSubscriber.dangerously_unscoped.filter(status_page=page).exists()
    mail.outbox.clear()
    now = timezone.now()
    scan_at(shown, now - timedelta(hours=2), GRADE_A)
    with django_capture_on_commit_callbacks(execute=True):
        alerts.after_scan(_down_at(shown, now - timedelta(hours=1)))
    assert mail.outbox == []
    tampered = link.replace("/unsubscribe/", "/unsubscribe/x")
    assert Client().post(tampered).status_code == 200  # nothing to tell a guesser either


def test_the_form_answers_the_same_whatever_happened_and_limits_hold(page, django_capture_on_commit_callbacks,
                                                                   monkeypatch):
    answers = []
    with django_capture_on_commit_callbacks(execute=True):
        for n in range(subscriptions.PER_ADDRESS_LIMIT + 1):
            answers.append(_subscribe(page, f"user{n}@example.org", address="198.51.100.7"))
    assert len(mail.outbox) == subscriptions.PER_ADDRESS_LIMIT  # the N+1th is refused
    texts = {(a.status_code, re.sub(r"\s+", " ", a.content.decode())) for a in answers}
    assert len(texts) == 1 and SAME_ANSWER in next(iter(texts))[1]

    _confirmed(page, "member@example.org", django_capture_on_commit_callbacks, address="198.51.100.8")
    mail.outbox.clear()
    with django_capture_on_commit_callbacks(execute=True):
        again = _subscribe(page, "MEMBER@example.org", address="198.51.100.9")  # already subscribed
        bot = _subscribe(page, "bot@example.org", address="198.51.100.9", website="http://spam")
    assert mail.outbox == [] and {again.content, bot.content} == {answers[0].content}
    assert not StatusPageSubscriber.dangerously_unscoped.filter(email="bot@example.org").exists()

    monkeypatch.setattr(subscriptions, "MAX_PENDING_PER_PAGE",
                        StatusPageSubscriber.dangerously_unscoped.filter(confirmed_at__isnull=True).count())
    with django_capture_on_commit_callbacks(execute=True):
        capped = _subscribe(page, "one-too-many@example.org", address="198.51.100.10")
    assert mail.outbox == [] and capped.content == answers[0].content

    bad = _subscribe(page, "not an address", address="198.51.100.11")
    assert bad.status_code == 400 and "valid email" in bad.content.decode()


def test_the_atom_feed_lists_incidents_and_maintenance_under_the_pages_names_only(world, page, shown):
    now = timezone.now()
    scan_at(shown, now - timedelta(hours=5), GRADE_A)
    _down_at(shown, now - timedelta(hours=4))
    scan_at(shown, now - timedelta(hours=3), GRADE_A)  # recovered
    _down_at(shown, now - timedelta(hours=1))  # down again, ongoing
    MaintenanceWindow.dangerously_unscoped.create(
        team=world.team, endpoint=shown, name="secret migration", kind="once",
        starts_at=now + timedelta(days=1), ends_at=now + timedelta(days=1, hours=1))

    response = Client().get(f"/status/{page.slug}/feed.atom")
    assert response.status_code == 200 and response["Content-Type"].startswith("application/atom+xml")
    body = response.content.decode()
    for secret in (REAL_NAME, REAL_URL, "secret migration", "10.9.8.7"):
        assert secret not in body
    entries = ET.fromstring(response.content).findall(f"{ATOM}entry")  # noqa: S314 - our own feed
    titles = [e.findtext(f"{ATOM}title") for e in entries]
    assert titles[0].startswith("Maintenance planned: Public API")  # created last: newest
    assert "Public API is down" in titles and "Public API was down for 1 h" in titles
    ids = [e.findtext(f"{ATOM}id") for e in entries]
    assert len(set(ids)) == 3 and all(e.findtext(f"{ATOM}updated") for e in entries)
    # Stable ids: the same entries once the cached copy is gone.
    clear_cache()
    again = ET.fromstring(Client().get(f"/status/{page.slug}/feed.atom").content)  # noqa: S314
    assert [e.findtext(f"{ATOM}id") for e in again.findall(f"{ATOM}entry")] == ids

    assert Client().get("/status/no-such-page/feed.atom").status_code == 404
    save_settings(page, enabled=False, slug=page.slug, title="Acme status", shown=[(shown, "Public API")])
    assert Client().get(f"/status/{page.slug}/feed.atom").status_code == 404


def test_the_team_sees_only_the_count_and_deleting_the_team_deletes_the_addresses(
        world, page, django_capture_on_commit_callbacks):
    _confirmed(page, "counted@example.org", django_capture_on_commit_callbacks)
    with django_capture_on_commit_callbacks(execute=True):
        _subscribe(page, "pending@example.org")
    client = Client()
    client.force_login(world.owner)
    html = client.get(f"/teams/{world.team.slug}/status-page/").content.decode()
    assert 'data-subscriber-count="1"' in html
    assert "counted@example.org" not in html and "pending@example.org" not in html
    public = Client().get(f"/status/{page.slug}/").content.decode()
    assert "counted@example.org" not in public and f"/status/{page.slug}/subscribe/" in public
    form = Client().get(f"/status/{page.slug}/subscribe/").content.decode()
    assert 'name="email"' in form and "counted@example.org" not in form

    world.team.delete()
    assert not StatusPageSubscriber.dangerously_unscoped.exists()
