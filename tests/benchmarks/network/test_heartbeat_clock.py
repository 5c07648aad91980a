"""Heartbeats are stamped by the server only: a time the client sends is ignored, and a stamp in
the future (a broken clock) never counts as online, on the coordinator or the public figures."""

from __future__ import annotations

from datetime import timedelta

import time_machine
from django.test import Client

from benchmarks.models import Host
from benchmarks.public import snapshot
from tests.conftest import bearer
from tests.helpers.network import T0


def test_a_time_the_client_sends_with_its_heartbeat_is_ignored(net):
    host, token = net.host("h1", heartbeat=False)
    future = (T0 + timedelta(days=365)).isoformat()
    with time_machine.travel(T0, tick=False):
        body = {"models": ["tiny-q4"], "timestamp": future, "sent_at": future,
                "last_heartbeat_at": future}
        answer = net.client.post("/v1/hosts/heartbeat", body, format="json", **bearer(token))
    assert answer.status_code == 200
    host.refresh_from_db()
    assert host.last_heartbeat_at == T0
    with time_machine.travel(T0 + timedelta(seconds=46), tick=False):
        assert list(Host.dangerously_unscoped.online()) == []


def test_a_heartbeat_stamped_in_the_future_does_not_count_as_online(net):
    host, _ = net.host("h1", heartbeat=False)
    Host.dangerously_unscoped.filter(pk=host.pk).update(last_heartbeat_at=T0 + timedelta(hours=1))
    host.refresh_from_db()

    with time_machine.travel(T0, tick=False):
        assert host.is_online() is False
        assert list(Host.dangerously_unscoped.online()) == []
        assert snapshot.build_snapshot(T0)["online_hosts"] == 0
        assert Client().get("/v1/stats").json()["online_hosts"] == 0
