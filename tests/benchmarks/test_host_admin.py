"""The Django admin for hosts and the catalog: what it lists, what its actions do, that hardware
trust is never granted, and that every change lands in the audit log."""

from __future__ import annotations

import re

import pytest
from django.db import IntegrityError, transaction
from django.test import Client
from django.urls import reverse

from benchmarks.models import AuditEntry, CatalogModel, Host, JobStatus
from benchmarks.network import hosts
from tests.conftest import make_user


@pytest.fixture
def staff(net) -> Client:
    user = make_user("site-admin")
    user.is_staff = user.is_superuser = True
    user.save()
    client = Client()
    client.force_login(user)
    return client


def _action(staff, action, *hosts_):
    return staff.post(reverse("admin:benchmarks_host_changelist"), {
        "action": action, "_selected_action": [h.pk for h in hosts_]})


def _entries(action):
    return list(AuditEntry.objects.filter(action=action))


def test_the_host_list_shows_online_state_trust_ewmas_reputation_and_failure_share(net, staff):
    host, token = net.host("gpu-box", reputation=0.75, ttft_ewma_ms=321.0, tps_ewma=45.5)
    for _ in range(3):
        net.submit_id()
        net.run(token)
    net.submit_id()
    leased = net.lease(token).json()["id"]
    net.fail(token, leased)
    page = staff.get(reverse("admin:benchmarks_host_changelist")).content.decode()
    for text in ("gpu-box", "software", "321", "45.5", "0.750", "25 %", "icon-yes.svg"):
        assert text in page, text


def test_the_host_page_lists_recent_jobs_but_not_their_bodies(net, staff):
    host, token = net.host("gpu-box")
    net.submit_id(content="a very private prompt")
    net.run(token, result={"content": "a very private answer"})
    page = staff.get(reverse("admin:benchmarks_host_change", args=[host.pk])).content.decode()
    assert "completed" in page and "tiny-q4" in page
    assert "very private" not in page


def test_adding_a_host_in_the_admin_shows_its_token_once(net, staff):
    response = staff.post(reverse("admin:benchmarks_host_add"), {
        "name": "from-admin", "team": net.operator.pk, "trust_level": "edr"})
    assert response.status_code == 200 and "no-store" in response["Cache-Control"]
    token = re.search(r'class="host-token">(tkh_[^<]+)<', response.content.decode()).group(1)
    assert net.heartbeat(token, ["tiny-q4"]).status_code == 200
    host = Host.dangerously_unscoped.get(name="from-admin")
    assert host.trust_level == "edr" and token[:12] == host.token_prefix
    assert _entries("create")[0].actor_label == "user site-admin"


def test_set_trust_actions_are_audited_and_none_grants_hardware(net, staff):
    host, _ = net.host("h1", trust="none")
    _action(staff, "set_trust_edr", host)
    host.refresh_from_db()
    assert host.trust_level == "edr"
    entry = _entries("set trust")[0]
    assert entry.changes == {"trust_level": ["none", "edr"]} and entry.actor_label == "user site-admin"
    actions = staff.get(reverse("admin:benchmarks_host_changelist")).context["action_form"]
    assert not [name for name, _ in actions.fields["action"].choices if "hardware" in name]


def test_the_change_form_refuses_hardware_trust(net, staff):
    host, _ = net.host("h1", trust="software")
    response = staff.post(reverse("admin:benchmarks_host_change", args=[host.pk]), {
        "name": "h1", "team": net.operator.pk, "trust_level": "hardware"})
    assert response.status_code == 200 and "Select a valid choice" in response.content.decode()
    host.refresh_from_db()
    assert host.trust_level == "software"
    assert not _entries("set trust")


def test_the_model_and_the_services_refuse_hardware_trust(net):
    host, token = net.host("h1")
    with pytest.raises(hosts.TrustNotGrantable):
        hosts.set_trust(host, "hardware", actor="test")
    with pytest.raises(hosts.TrustNotGrantable):
        hosts.create_host(net.operator, "h2", "hardware")
    with pytest.raises(IntegrityError), transaction.atomic():
        Host.dangerously_unscoped.filter(pk=host.pk).update(trust_level="hardware")
    # and the API has no way to ask for it: unknown heartbeat fields change nothing
    net.client.post("/v1/hosts/heartbeat", {"models": ["tiny-q4"], "trust_level": "hardware"},
                    format="json", HTTP_AUTHORIZATION=f"Bearer {token}")
    host.refresh_from_db()
    assert host.trust_level == "software"


def test_the_change_form_edits_are_audited_field_by_field(net, staff):
    host, _ = net.host("old-name", trust="none")
    staff.post(reverse("admin:benchmarks_host_change", args=[host.pk]), {
        "name": "new-name", "team": net.buyer.pk, "trust_level": "software",
        "connect_ready": "on"})
    host.refresh_from_db()
    assert (host.name, host.team, host.trust_level, host.connect_ready) == (
        "new-name", net.buyer, "software", True)
    assert _entries("edit")[0].changes == {"name": ["old-name", "new-name"],
                                           "team": ["hostops", "buyer"]}
    assert _entries("set trust")[0].changes == {"trust_level": ["none", "software"]}
    assert _entries("set connect readiness")[0].changes == {"connect_ready": [False, True]}


def test_suspending_from_the_admin_takes_the_host_offline_and_requeues_its_jobs(net, staff):
    host, token = net.host("h1")
    job_id = net.submit_id()
    _action(staff, "suspend", host)
    host.refresh_from_db()
    assert host.suspended and not host.is_online()
    assert net.job(job_id).status == JobStatus.QUEUED
    assert _entries("suspend")[0].changes == {"suspended": [False, True]}
    _action(staff, "unsuspend", host)
    assert _entries("unsuspend")


def test_revoking_from_the_admin_makes_the_token_fail(net, staff):
    host, token = net.host("h1")
    _action(staff, "revoke_token", host)
    assert net.heartbeat(token, ["tiny-q4"]).status_code == 401
    assert _entries("revoke token")


def test_rotating_from_the_admin_shows_the_new_token_once_and_retires_the_old(net, staff):
    host, old = net.host("h1")
    response = _action(staff, "rotate_token", host)
    assert "no-store" in response["Cache-Control"]
    new = re.search(r'class="host-token">(tkh_[^<]+)<', response.content.decode()).group(1)
    assert net.heartbeat(old, ["tiny-q4"]).status_code == 401
    assert net.heartbeat(new, ["tiny-q4"]).status_code == 200
    assert new not in str(_entries("rotate token")[0].changes)  # only prefixes are logged


def test_connect_readiness_actions_are_audited(net, staff):
    host, _ = net.host("h1")
    _action(staff, "mark_connect_ready", host)
    host.refresh_from_db()
    assert host.connect_ready
    _action(staff, "mark_connect_not_ready", host)
    host.refresh_from_db()
    assert not host.connect_ready
    assert [e.changes for e in _entries("set connect readiness")] == [
        {"connect_ready": [True, False]}, {"connect_ready": [False, True]}]


def test_catalog_changes_in_the_admin_are_audited(net, staff):
    staff.post(reverse("admin:benchmarks_catalogmodel_add"), {
        "id": "new-q8", "display_name": "New", "quant": "Q8_0", "context_len": 8192, "active": "on",
        "created_at_0": "2030-01-01", "created_at_1": "00:00:00"})
    assert CatalogModel.objects.filter(pk="new-q8").exists()
    staff.post(reverse("admin:benchmarks_catalogmodel_change", args=["new-q8"]), {
        "display_name": "New", "quant": "Q8_0", "context_len": 4096,
        "created_at_0": "2030-01-01", "created_at_1": "00:00:00"})
    edit = AuditEntry.objects.get(target_id="new-q8", action="edit")
    assert edit.changes["context_len"] == [8192, 4096] and edit.changes["active"] == [True, False]
    assert AuditEntry.objects.filter(target_id="new-q8", action="create").exists()


def test_the_audit_log_cannot_be_edited_from_the_admin(net, staff):
    host, _ = net.host("h1")
    hosts.set_trust(host, "edr", actor="test")
    entry = AuditEntry.objects.first()
    assert staff.get(reverse("admin:benchmarks_auditentry_add")).status_code == 403
    change = reverse("admin:benchmarks_auditentry_change", args=[entry.pk])
    assert staff.get(change).status_code == 200  # viewable
    assert staff.post(change, {"action": "forged"}).status_code == 403
    assert staff.post(reverse("admin:benchmarks_auditentry_delete", args=[entry.pk]),
                      {"post": "yes"}).status_code == 403
    assert AuditEntry.objects.filter(pk=entry.pk).exists()
