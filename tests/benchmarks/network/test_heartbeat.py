"""POST /v1/hosts/heartbeat: what it records, when a host is online, bad input, rate limits."""

from __future__ import annotations

from datetime import timedelta

import time_machine
from django.db import connection
from django.test.utils import CaptureQueriesContext

from accounts import teams
from benchmarks.models import Host
from tests.conftest import bearer
from tests.helpers.network import T0, make_catalog


def test_heartbeat_records_models_hardware_and_slots(net):
    make_catalog("small-q8")
    host, token = net.host("h1", heartbeat=False)
    with time_machine.travel(T0, tick=False):
        response = net.heartbeat(token, ["tiny-q4", "small-q8", "tiny-q4"], slots=3, hardware={
            "gpu_model": "RTX 4090", "vram_mb": 24576, "cpu_model": "Ryzen 9", "ram_mb": 65536})
    assert response.status_code == 200
    assert response.json()["online"] is True
    assert response.json()["heartbeat_interval_s"] == 15
    host.refresh_from_db()
    assert host.last_heartbeat_at == T0
    assert host.advertised == ["small-q8", "tiny-q4"]
    assert sorted(host.catalog_models.values_list("id", flat=True)) == ["small-q8", "tiny-q4"]
    assert (host.slots, host.gpu_model, host.vram_mb, host.cpu_model, host.ram_mb) == (
        3, "RTX 4090", 24576, "Ryzen 9", 65536)


def test_a_changed_model_list_replaces_the_old_one(net):
    make_catalog("small-q8")
    host, token = net.host("h1", models=["tiny-q4", "small-q8"])
    assert net.heartbeat(token, ["small-q8"]).status_code == 200
    host.refresh_from_db()
    assert host.advertised == ["small-q8"]
    assert list(host.catalog_models.values_list("id", flat=True)) == ["small-q8"]
    assert list(Host.dangerously_unscoped.online_for("tiny-q4")) == []


def test_host_is_online_for_45_seconds_after_its_last_heartbeat(net):
    with time_machine.travel(T0, tick=False) as clock:
        host, _ = net.host("h1")
        clock.move_to(T0 + timedelta(seconds=45))
        assert list(Host.dangerously_unscoped.online_for("tiny-q4")) == [host]
        clock.move_to(T0 + timedelta(seconds=45, microseconds=1))
        assert list(Host.dangerously_unscoped.online()) == []
        host.refresh_from_db()
        assert host.is_online() is False


def test_a_suspended_host_is_not_online_even_while_it_heartbeats(net):
    host, token = net.host("h1")
    Host.dangerously_unscoped.filter(pk=host.pk).update(suspended=True)
    response = net.heartbeat(token, ["tiny-q4"])
    assert response.status_code == 200
    assert response.json()["online"] is False
    assert list(Host.dangerously_unscoped.online()) == []


def test_a_host_with_no_ewma_yet_is_online_and_counted(net):
    host, _ = net.host("h1")
    assert host.ttft_ewma_ms is None and host.tps_ewma is None
    assert Host.dangerously_unscoped.online_for("tiny-q4").count() == 1


def test_unknown_catalog_ids_are_refused_with_422_naming_them(net):
    host, token = net.host("h1", heartbeat=False)
    response = net.heartbeat(token, ["tiny-q4", "nope-1", "also-not"])
    assert response.status_code == 422
    assert response.json()["unknown_models"] == ["also-not", "nope-1"]
    assert "also-not, nope-1" in response.json()["detail"]
    host.refresh_from_db()
    assert host.last_heartbeat_at is None and host.advertised == []


def test_bad_slots_and_hardware_are_refused(net):
    _, token = net.host("h1", heartbeat=False)
    for body in (
        {"models": ["tiny-q4"], "slots": 0},
        {"models": ["tiny-q4"], "slots": 10_000},
        {"models": ["tiny-q4"], "slots": "2"},
        {"models": ["tiny-q4"], "hardware": {"vram_mb": -1}},
        {"models": "tiny-q4"},
        {},
    ):
        response = net.client.post("/v1/hosts/heartbeat", body, format="json", **bearer(token))
        assert response.status_code == 400, body


def test_wrong_malformed_or_missing_host_tokens_get_401(net):
    _, token = net.host("h1", heartbeat=False)
    for header in (
        bearer(token[:-2] + "xx"),
        bearer("tkh_" + "a" * 40),
        bearer("not-a-token"),
        {"HTTP_AUTHORIZATION": "Basic Zm9vOmJhcg=="},
        {},
    ):
        response = net.client.post("/v1/hosts/heartbeat", {"models": ["tiny-q4"]}, format="json",
                                   **header)
        assert response.status_code == 401, header


def test_a_team_api_token_is_not_a_host_token(net):
    _, team_token = teams.issue_token(net.operator, "read-write")
    response = net.heartbeat(team_token, ["tiny-q4"])
    assert response.status_code == 401


def test_a_heartbeat_flood_is_rate_limited_without_touching_other_hosts(net, settings):
    settings.NETWORK_HEARTBEAT_LIMIT = 5
    _, flooder = net.host("flooder", heartbeat=False)
    _, quiet = net.host("quiet", heartbeat=False)
    codes = [net.heartbeat(flooder, ["tiny-q4"]).status_code for _ in range(12)]
    assert codes[:5] == [200] * 5
    assert set(codes[5:]) == {429}
    limited = net.heartbeat(flooder, ["tiny-q4"])
    assert int(limited["Retry-After"]) >= 1
    assert net.heartbeat(quiet, ["tiny-q4"]).status_code == 200


def test_heartbeats_no_faster_than_the_limit_allows_do_not_spend_the_allowance(net, settings):
    """The limit is folded into the steady UPDATE: a heartbeat at least window / limit after
    the last one (20 s here) is recorded without being counted, so the host keeps its whole
    allowance for quick calls (a model change, a restart) in the same window."""
    settings.NETWORK_HEARTBEAT_LIMIT = 3  # per 60 s: one every 20 s is never counted
    start = T0.replace(second=0, microsecond=0) + timedelta(minutes=1)  # one fixed window
    with time_machine.travel(start, tick=False) as clock:
        host, token = net.host("h1")  # counted: its first heartbeat changed its model list
        for seconds in (21, 42):
            clock.move_to(start + timedelta(seconds=seconds))
            with CaptureQueriesContext(connection) as steady:
                assert net.heartbeat(token, ["tiny-q4"]).status_code == 200
            assert len(steady.captured_queries) == 1  # the UPDATE, and nothing counted
        quick = []
        for seconds in (43, 44, 45):
            clock.move_to(start + timedelta(seconds=seconds))
            quick.append(net.heartbeat(token, ["tiny-q4"]).status_code)
    assert quick == [200, 200, 429]
    host.refresh_from_db()
    assert host.last_heartbeat_at == start + timedelta(seconds=44)


def test_a_refused_heartbeat_records_nothing(net, settings):
    settings.NETWORK_HEARTBEAT_LIMIT = 1
    with time_machine.travel(T0, tick=False) as clock:
        host, token = net.host("h1")
        clock.move_to(T0 + timedelta(seconds=10))
        assert net.heartbeat(token, ["tiny-q4"]).status_code == 429
    host.refresh_from_db()
    assert host.last_heartbeat_at == T0


def test_hosts_come_back_for_a_model_deleted_and_created_again(net):
    from benchmarks.models import CatalogModel, Host

    host, token = net.host("h1", models=("tiny-q4",))
    CatalogModel.objects.filter(id="tiny-q4").delete()
    CatalogModel.objects.create(id="tiny-q4", display_name="Tiny", quant="Q4_K_M",
                                context_len=2048)
    net.heartbeat(token, ["tiny-q4"])  # the same list as before the deletion
    assert Host.dangerously_unscoped.online_for("tiny-q4").filter(pk=host.pk).exists()


def test_a_steady_heartbeat_updates_slots_and_hardware_and_keeps_the_models(net):
    host, token = net.host("h1", slots=1)
    with time_machine.travel(T0, tick=False):
        response = net.heartbeat(token, ["tiny-q4"], slots=4, hardware={"gpu_model": "RTX 5090"})
    assert response.status_code == 200
    assert response.json() == {"online": True, "heartbeat_interval_s": 15, "models": ["tiny-q4"],
                               "slots": 4, "trust_level": "software", "suspended": False}
    host.refresh_from_db()
    assert (host.last_heartbeat_at, host.slots, host.gpu_model) == (T0, 4, "RTX 5090")
    assert list(host.catalog_models.values_list("id", flat=True)) == ["tiny-q4"]



def test_a_steady_heartbeat_is_a_hot_update_that_writes_no_index(net):
    """Issue 25: no index covers what a heartbeat rewrites, so PostgreSQL updates the row in
    place (a heap-only tuple) instead of adding an entry to each of the table's indexes."""
    _, token = net.host("h1")

    def hot_updates() -> int:
        with connection.cursor() as cursor:  # this transaction's own counters, read at once
            cursor.execute("SELECT pg_stat_get_xact_tuples_hot_updated(%s::regclass)",
                           [Host._meta.db_table])
            return cursor.fetchone()[0]

    before = hot_updates()
    for _ in range(3):
        assert net.heartbeat(token, ["tiny-q4"], hardware={"gpu_model": "RTX 4090"}).status_code == 200
    assert hot_updates() == before + 3
