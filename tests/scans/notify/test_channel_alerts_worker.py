"""A down alert from a real scan reaches a channel: a real worker scans a port where
nothing listens, finds the endpoint down after an up scan, records the alert and delivers it,
from its own process, to the Slack stand-in (tests/helpers/notify_services.py) through the
outbound guard; the delivery row says it was sent."""

from __future__ import annotations

import socket

import pytest

from scans.models import Delivery, DeliveryStatus, Scan, ScanStatus, ScanTrigger
from scans.running import dispatch
from scans.running import worker as scan_worker
from tests.helpers import workers
from tests.helpers.factories import make_channel, make_endpoint
from tests.helpers.notify_services import channel_urls, running_services
from tests.helpers.processes import wait_for
from tests.helpers.workers import stop, worker_env
from tests.scans.conftest import GRADE_A, report_for
from tokvera_site.celery import app

pytestmark = [pytest.mark.redis, pytest.mark.django_db(transaction=True)]


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_real_scan_of_a_dead_port_sends_a_down_alert_to_a_slack_channel(world, tmp_path):
    app.control.purge()
    with running_services(tmp_path) as services:
        channel = make_channel(world.team, "slack", name="on call", url=channel_urls(services.port)["slack"])
        endpoint = make_endpoint(
            world.team,
            name="dead box",
            alert_email=False,
            base_url=f"http://127.0.0.1:{_dead_port()}/v1",
            levels=[1],
            requests_per_level=2,
        )
        endpoint.channels.set([channel])
        scan_worker.store_report(  # up first: "down" is news only after a scan that was not
            Scan.dangerously_unscoped.create(endpoint=endpoint, trigger=ScanTrigger.SCHEDULE),
            report_for(GRADE_A, model=endpoint.model),
        )
        worker = workers.start(
            env=worker_env(
                OUTBOUND_RESOLVE=",".join(services.resolve()), REQUESTS_CA_BUNDLE=str(services.ca_path)
            )
        )
        try:
            scan = Scan.dangerously_unscoped.create(endpoint=endpoint, trigger=ScanTrigger.MANUAL)
            dispatch.send(scan.pk)
            wait_for(lambda: services.of("slack"), 120, "the down alert at the Slack stand-in")
            wait_for(
                lambda: Delivery.dangerously_unscoped.filter(
                    channel=channel, status=DeliveryStatus.SENT
                ).exists(),
                30,
                "the delivery row",
            )
        finally:
            stop(worker)
            app.control.purge()
    scan.refresh_from_db()
    assert scan.status == ScanStatus.SUCCEEDED and scan.down
    (message,) = services.of("slack")
    attachment = message.body["attachments"][0]
    assert attachment["title"] == "[Tokvera] dead box: down"
    assert "the endpoint is down: could not connect to 127.0.0.1" in attachment["text"]
    assert "State: Down" in attachment["text"] or "State: down" in attachment["text"]
    assert f"/scans/{scan.public_id}/" in attachment["text"]
    (row,) = Delivery.dangerously_unscoped.filter(channel=channel)
    assert (row.event.kind, row.attempts, row.event.scan_id) == ("down", 1, scan.pk)
