"""Nothing stored from a response carries the endpoint's key.

The upstreams are raw loopback servers that echo what they were sent in their error bodies;
the scan runs for real through scans.running.worker.execute and a viewer reads report.json through
the API and the scan page.
"""

from __future__ import annotations

import asyncio

import pytest
from django.test import Client
from django.urls import reverse

from accounts import encryption
from scans.models import Scan, ScanStatus
from scans.running import worker as scan_worker
from tests.helpers.factories import make_endpoint
from tests.helpers.servers import json_response, raw_server, read_request

pytestmark = pytest.mark.django_db

API_KEY = "sk-live-4c1d2e3f4a5b6c7d8e9f"


def echo_authorization_500(padding: int = 0):
    """Answers every request with HTTP 500 whose body quotes the request's Authorization
    header (after `padding` characters, to move it across the error-body cut)."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                head, _ = await read_request(reader)
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            auth = next((line.split(b":", 1)[1].strip().decode()
                         for line in head.split(b"\r\n")
                         if line.lower().startswith(b"authorization:")), "")
            writer.write(json_response(500, {"error": {
                "message": "x" * padding + f"upstream rejected key {auth.split()[-1]}",
                "headers": {"Authorization": auth}}}))
            await writer.drain()

    return handler


def run_keyed_scan(world, port: int) -> Scan:
    endpoint = make_endpoint(world.team, base_url=f"http://127.0.0.1:{port}/v1", levels=[1],
                             requests_per_level=2, api_key_encrypted=encryption.encrypt(API_KEY))
    scan = scan_worker.claim(Scan.dangerously_unscoped.create(endpoint=endpoint,
                                                           trigger="manual").pk)
    assert scan_worker.execute(scan) == "succeeded"
    scan.refresh_from_db()
    return scan


@pytest.mark.parametrize("padding", [0, 143], ids=["whole", "cut-at-the-limit"])
def test_an_upstream_echoing_the_authorization_header_never_puts_the_key_in_report_json(
        world, settings, api, padding):
    settings.OUTBOUND_ALLOW = ["loopback"]
    with raw_server(echo_authorization_500(padding)) as port:
        scan = run_keyed_scan(world, port)
    assert scan.status == ScanStatus.SUCCEEDED
    assert scan.report["levels"][0]["failed"] == {"http_status_500": 2}
    example = scan.report["levels"][0]["failure_examples"]["http_status_500"]
    assert example.startswith("HTTP 500") and "[redacted]" in example

    api.force_login(world.viewer)
    stored = api.get(f"/api/v1/scans/{scan.public_id}/report.json").content.decode()
    viewer = Client()
    viewer.force_login(world.viewer)
    page = viewer.get(reverse("scan-detail", args=[scan.public_id])).content.decode()
    html = viewer.get(reverse("scan-report-html", args=[scan.public_id])).content.decode()
    for text in (stored, page, html):
        assert API_KEY[:8] not in text


def test_a_failure_reason_quoting_the_key_is_stored_redacted(world):
    endpoint = make_endpoint(world.team, api_key_encrypted=encryption.encrypt(API_KEY))
    scan = Scan.dangerously_unscoped.create(endpoint=endpoint, trigger="manual")

    scan_worker.fail(scan.pk, f"upstream said: Authorization: Bearer {API_KEY} is invalid "
                           f"(key {API_KEY})")

    scan.refresh_from_db()
    assert scan.status == ScanStatus.ERRORED
    assert API_KEY[:8] not in scan.error_reason
    assert scan.error_reason.startswith("upstream said: Authorization: Bearer [redacted]")
