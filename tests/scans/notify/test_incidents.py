"""Incidents as a team lives them: confirmed problems open one (two endpoints failing together
share it), their recoveries resolve it, acknowledging stops the reminders, people post updates
(public ones reach the status page, its feed and its subscribers, under the page's names only),
resolve by hand and write the postmortem; a manual incident for what no check sees. Real
loopback servers and real probes for the alert path; the API with team tokens; pages as the
team sees them; and no team sees another's incidents."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.core import mail
from django.test import Client
from django.utils import timezone

from audit.models import AuditEntry
from scans.models import AlertEvent, Endpoint, Incident, IncidentUpdate
from scans.status_pages import subscriptions
from scans.status_pages.settings import page_of, save_settings
from tests.conftest import bearer, clear_cache
from tests.helpers.factories import make_endpoint
from tests.scans.conftest import CAPPED_D, GRADE_A, NOW, scan_at
from tests.scans.liveness.test_liveness import _closed_port, _probe, switchable

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _loopback(settings):
    settings.OUTBOUND_ALLOW = ["loopback"]


@pytest.fixture(autouse=True)
def _fresh_cache():
    clear_cache()
    yield
    clear_cache()


def _incidents(team) -> list[Incident]:
    return list(Incident.dangerously_unscoped.filter(team=team).order_by("opened_at"))


def _timeline(incident) -> list[tuple[str, str]]:
    return [(line.kind, line.alert.kind if line.alert else "")
            for line in IncidentUpdate.dangerously_unscoped.filter(incident=incident)
            .select_related("alert").order_by("at", "pk")]


def test_two_endpoints_down_together_are_one_incident_resolved_when_both_answer(world):
    with switchable() as (first, first_url), switchable() as (second, second_url):
        chat = make_endpoint(world.team, name="chat", base_url=first_url, model="m")
        code = make_endpoint(world.team, name="code", base_url=second_url, model="m")
        _probe(chat, code)
        first.failing = second.failing = True
        _probe(chat, code)
        _probe(chat, code)  # the second failure in a row confirms both
        (incident,) = _incidents(world.team)
        assert incident.title == "2 endpoints: down" and incident.open
        assert {p.endpoint.name for p in incident.problems.all()} == {"chat", "code"}
        assert _timeline(incident) == [("opened", "down"), ("alert", "down")]

        first.failing = False
        _probe(chat, code)
        _probe(chat, code)  # chat answers again: one problem ends, the incident stays open
        incident.refresh_from_db()
        assert incident.open
        second.failing = False
        _probe(chat, code)
        _probe(chat, code)
    incident.refresh_from_db()
    assert not incident.open and incident.status == "resolved"
    assert _timeline(incident)[-3:] == [("alert", "down_recovered"), ("alert", "down_recovered"),
                                        ("resolved", "")]
    assert incident.timeline.last().text == "every problem recovered"
    assert all(p.ended_at for p in incident.problems.all())


def test_a_problem_long_after_another_opens_its_own_incident(world):
    with switchable() as (server, url):
        chat = make_endpoint(world.team, name="chat", base_url=url, model="m")
        dead = make_endpoint(world.team, name="dead", base_url=f"http://127.0.0.1:{_closed_port()}/v1")
        for _ in range(3):
            _probe(dead)
        Incident.dangerously_unscoped.filter(team=world.team).update(
            last_problem_at=timezone.now() - timedelta(hours=1))
        server.failing = True
        for _ in range(3):
            _probe(chat)
    assert [i.title for i in _incidents(world.team)] == ["dead is down", "chat is down"]


def test_below_the_floor_opens_an_incident_and_meeting_it_resolves_it(world):
    endpoint = make_endpoint(world.team, name="slow")
    for minutes, values in enumerate((GRADE_A, CAPPED_D, CAPPED_D, GRADE_A, GRADE_A)):
        scan_at(endpoint, NOW + timedelta(minutes=minutes), values)
    (incident,) = _incidents(world.team)
    assert incident.title == "slow is below the grade floor"
    assert _timeline(incident) == [("opened", "below_floor"), ("alert", "floor_recovered"),
                                   ("resolved", "")]
    assert not incident.open


def test_acknowledging_stops_the_reminders_and_says_who(world, api):
    dead = make_endpoint(world.team, name="dead", renotify_minutes=30,
                         base_url=f"http://127.0.0.1:{_closed_port()}/v1")
    for _ in range(3):
        _probe(dead)
    (incident,) = _incidents(world.team)

    def remind() -> None:
        Endpoint.dangerously_unscoped.filter(pk=dead.pk).update(
            liveness_notified_at=timezone.now() - timedelta(minutes=31))
        _probe(dead)

    remind()
    assert _timeline(incident)[-1] == ("alert", "still_down")  # unacknowledged: reminded
    answer = api.post(f"/api/v1/incidents/{incident.public_id}/acknowledge/",
                      **bearer(world.read_write_token))
    assert answer.status_code == 200
    assert answer.json()["acknowledged_by"].startswith("token read-write")
    remind()
    kinds = list(AlertEvent.dangerously_unscoped.filter(endpoint=dead).values_list("kind", flat=True))
    assert kinds.count("still_down") == 1  # acknowledged: no more reminders
    assert _timeline(incident)[-1] == ("acknowledged", "")
    again = api.post(f"/api/v1/incidents/{incident.public_id}/acknowledge/",
                     **bearer(world.read_write_token))
    assert again.json()["acknowledged_at"] == answer.json()["acknowledged_at"]  # once
    assert AuditEntry.dangerously_unscoped.filter(team=world.team, object_type="incident").count() == 1


@pytest.fixture
def public_page(world):
    shown = make_endpoint(world.team, name="prod llama internal", alert_email=False)
    page = page_of(world.team)
    page = save_settings(page, enabled=True, slug=page.slug, title="Acme status",
                         shown=[(shown, "Public API")])
    return page, shown


def test_a_manual_incident_with_public_updates_reaches_the_page_feed_and_subscribers(
        world, api, public_page, monkeypatch, django_capture_on_commit_callbacks):
    page, shown = public_page
    monkeypatch.setattr(subscriptions.mail_status_page_news, "delay",
                        lambda *args: subscriptions.mail_status_page_news(*args))
    with django_capture_on_commit_callbacks(execute=True):
        Client().post(f"/status/{page.slug}/subscribe/", {"email": "v@example.org"},
                      REMOTE_ADDR="192.0.2.10")
    link = re.search(r"(/status/[a-z0-9-]+/confirm/\S+/)", mail.outbox[-1].body).group(1)
    assert Client().get(link).status_code == 200
    mail.outbox.clear()

    token = bearer(world.read_write_token)
    with django_capture_on_commit_callbacks(execute=True):
        made = api.post("/api/v1/incidents/", {
            "title": "Upstream provider outage (internal ticket 4411)", "endpoints": [str(shown.public_id)],
            "status": "identified", "text": "Our GPU provider lost a rack; traffic is moving.",
            "public": True}, format="json", **token)
    assert made.status_code == 201, made.content
    incident_id = made.json()["id"]
    assert made.json()["manual"] and made.json()["status"] == "identified"
    with django_capture_on_commit_callbacks(execute=True):
        private = api.post(f"/api/v1/incidents/{incident_id}/updates/", {
            "status": "monitoring", "text": "ops: restarted pod llama-7 on 10.0.0.5"},
            format="json", **token)
    assert private.status_code == 201

    clear_cache()
    html = Client().get(f"/status/{page.slug}/").content.decode()
    assert "Our GPU provider lost a rack" in html and "Public API" in html
    for secret in ("internal ticket 4411", "prod llama internal", "llama-7", "10.0.0.5"):
        assert secret not in html  # the title, the real name and private words stay inside
    feed = Client().get(f"/status/{page.slug}/feed.atom").content.decode()
    assert "Our GPU provider lost a rack" in feed and "llama-7" not in feed
    (news,) = mail.outbox  # the public update only
    assert news.to == ["v@example.org"] and "Identified: Public API" in news.subject
    assert "lost a rack" in news.body and "/unsubscribe/" in news.body

    with django_capture_on_commit_callbacks(execute=True):
        done = api.post(f"/api/v1/incidents/{incident_id}/updates/", {
            "status": "resolved", "text": "Traffic is back on the new rack.", "public": True},
            format="json", **token)
    assert done.status_code == 201 and done.json()["resolved_at"]
    assert len(mail.outbox) == 2 and "Resolved: Public API" in mail.outbox[-1].subject
    late = api.post(f"/api/v1/incidents/{incident_id}/updates/",
                    {"status": "monitoring", "text": "x"}, format="json", **token)
    assert late.status_code == 409 and "resolved" in late.json()["detail"]
    written = api.put(f"/api/v1/incidents/{incident_id}/postmortem/",
                      {"postmortem": "A rack lost power; we now spread replicas."},
                      format="json", **token)
    assert written.status_code == 200 and written.json()["postmortem"].startswith("A rack")
    assert [line["kind"] for line in written.json()["timeline"]] == [
        "opened", "update", "resolved", "postmortem"]


def test_a_postmortem_waits_for_the_resolution_and_bad_input_changes_nothing(world, api):
    token = bearer(world.read_write_token)
    made = api.post("/api/v1/incidents/", {"title": "Slow answers", "text": "looking"},
                    format="json", **token).json()
    early = api.put(f"/api/v1/incidents/{made['id']}/postmortem/", {"postmortem": "x"},
                    format="json", **token)
    assert early.status_code == 409
    bad = api.post(f"/api/v1/incidents/{made['id']}/updates/", {"status": "fixed", "text": "x"},
                   format="json", **token)
    assert bad.status_code == 400 and "status" in bad.json()
    foreign = make_endpoint(world.other_team, name="theirs")
    refused = api.post("/api/v1/incidents/", {"title": "t", "text": "x",
                                              "endpoints": [str(foreign.public_id)]},
                       format="json", **token)
    assert refused.status_code == 422
    assert Incident.dangerously_unscoped.filter(team=world.team).count() == 1
    assert IncidentUpdate.dangerously_unscoped.filter(incident__team=world.team).count() == 1


def test_no_team_sees_or_touches_another_teams_incidents_and_viewers_only_read(world, api):
    made = api.post("/api/v1/incidents/", {"title": "Ours", "text": "x"}, format="json",
                    **bearer(world.read_write_token)).json()
    other = bearer(world.other_team_token)
    assert api.get("/api/v1/incidents/", **other).json()["results"] == []
    assert api.get(f"/api/v1/incidents/{made['id']}/", **other).status_code == 404
    assert api.post(f"/api/v1/incidents/{made['id']}/acknowledge/", **other).status_code == 404
    assert api.post(f"/api/v1/incidents/{made['id']}/acknowledge/",
                    **bearer(world.read_only_token)).status_code == 403
    outsider = Client()
    outsider.force_login(world.outsider)
    assert outsider.get(f"/incidents/{made['id']}/").status_code == 404
    assert outsider.post(f"/incidents/{made['id']}/acknowledge").status_code == 404
    viewer = Client()
    viewer.force_login(world.viewer)
    assert viewer.get(f"/incidents/{made['id']}/").status_code == 200
    assert viewer.post(f"/incidents/{made['id']}/acknowledge").status_code == 403
    assert viewer.get(f"/teams/{world.team.slug}/incidents/new").status_code == 403
    assert Incident.dangerously_unscoped.get(public_id=made["id"]).acknowledged_at is None


def test_the_pages_list_open_first_and_take_updates_and_a_postmortem(world):
    member = Client()
    member.force_login(world.member)
    slug = world.team.slug
    answer = member.post(f"/teams/{slug}/incidents/new", {
        "title": "Wrong answers from the code model", "status": "investigating",
        "text": "Users report truncated code."})
    assert answer.status_code == 302
    incident = Incident.dangerously_unscoped.get(team=world.team)
    listing = member.get(f"/teams/{slug}/incidents/").content.decode()
    assert "Wrong answers from the code model" in listing and "not acknowledged" in listing
    assert member.post(f"/incidents/{incident.public_id}/acknowledge").status_code == 302
    page = member.get(f"/incidents/{incident.public_id}/").content.decode()
    assert f"by {world.member.email}" in page
    refused = member.post(f"/incidents/{incident.public_id}/update", {"status": "identified"})
    assert refused.status_code == 400  # no words: nothing posted
    member.post(f"/incidents/{incident.public_id}/update",
                {"status": "resolved", "text": "A bad tokenizer file; rolled back."})
    member.post(f"/incidents/{incident.public_id}/postmortem",
                {"postmortem": "We now check the tokenizer's hash before a deploy."})
    incident.refresh_from_db()
    assert incident.resolved_at and "tokenizer's hash" in incident.postmortem
    page = member.get(f"/incidents/{incident.public_id}/").content.decode()
    assert "rolled back" in page and "tokenizer&#x27;s hash" in page


def test_an_incident_s_troubles_are_the_ones_the_channels_key_their_incidents_by():
    from scans.notify import incidents
    from scans.notify.channels.messages import TROUBLE

    # A paging service's incident (dedup key) and ours group the same alerts.
    assert all(TROUBLE[kind] == trouble for kind, trouble in incidents.OPENERS.items())
    assert all(TROUBLE[kind] == trouble for kind, trouble in incidents.ENDERS.items())


def test_an_endpoint_moved_or_deleted_ends_its_problems_and_a_new_outage_opens_a_new_one(world):
    from accounts.tenancy import Access
    from scans.endpoints import service

    dead = make_endpoint(world.team, name="dead", base_url=f"http://127.0.0.1:{_closed_port()}/v1")
    gone = make_endpoint(world.team, name="gone", base_url=f"http://127.0.0.1:{_closed_port()}/v1")
    for _ in range(3):
        _probe(dead, gone)
    (first,) = _incidents(world.team)
    service.update(dead, {"base_url": f"http://127.0.0.1:{_closed_port()}/v1"},
                   by=Access(roles={world.team.pk: "owner"}))
    first.refresh_from_db()
    assert first.open  # "gone" is still down
    Endpoint.dangerously_unscoped.filter(pk=gone.pk).delete()
    first.refresh_from_db()
    assert not first.open and first.timeline.last().text == "every problem recovered"
    for _ in range(3):
        _probe(dead)  # the new server is down too: news, and a new incident
    assert [i.open for i in _incidents(world.team)] == [False, True]


def test_the_public_never_sees_a_status_only_a_private_update_set(world, api, public_page):
    page, shown = public_page
    token = bearer(world.read_write_token)
    made = api.post("/api/v1/incidents/", {"title": "t", "endpoints": [str(shown.public_id)],
                                           "status": "investigating", "text": "Looking into it.",
                                           "public": True}, format="json", **token).json()
    api.post(f"/api/v1/incidents/{made['id']}/updates/", {"status": "monitoring",
                                                          "text": "private"}, format="json", **token)
    html = Client().get(f"/status/{page.slug}/").content.decode()
    assert "Looking into it." in html and "Investigating" in html and "Monitoring" not in html
