"""An SLO that burns says so, end to end: a real Celery worker scans a loopback
`tokvera target` whose first token comes after 300 ms against a 100 ms TTFT target, so every
scan misses; the worker stores each scan and evaluates the burn-rate alerts, which page once
by email (captured in files: the worker is another process) and by the signed webhook (a
loopback receiver); the dashboard and the endpoint page, in Chromium at 1,400 and 390 px, say
"breaching" in red, never "meets", and the budget left is neither green nor bold.

The schedule is 60 minutes; a test cannot wait for it, so after each real scan the endpoint's
scans are moved 60 minutes back, as if the beat had run them an hour apart. The scans
themselves (requests, timings, checks, storing, alerts) are the worker's own."""

from __future__ import annotations

import email
import json
from datetime import timedelta
from pathlib import Path

import pytest
from django.db.models import F

from scans.grader.demo_server import MODEL_ID, TargetConfig, running_target
from scans.models import CheckResult, Endpoint, OriginLock, Scan, ScanStatus, ScanTrigger
from scans.running import dispatch
from tests.conftest import build_world
from tests.helpers import workers
from tests.helpers.browser import ARTIFACTS
from tests.helpers.factories import make_endpoint
from tests.helpers.processes import wait_for
from tests.helpers.servers import webhook_receiver
from tests.helpers.workers import stop, worker_env
from tests.scans.pages.test_ux_browser import DESKTOP, PHONE, logged_in_page
from tokvera_site.celery import app

pytestmark = [pytest.mark.browser, pytest.mark.redis, pytest.mark.django_db(transaction=True)]

INTERVAL = timedelta(minutes=60)
SCANS = 4  # 3 h of covered time before the last: the 6 h and 30 min pair needs half its 6 h
RED = "rgb(210, 59, 59)"  # --f in static/tokvera.css
GREEN = "rgb(26, 156, 91)"  # --a


def _scan_once(endpoint) -> Scan:
    scan = Scan.dangerously_unscoped.create(endpoint=endpoint, trigger=ScanTrigger.MANUAL)
    dispatch.send(scan.pk)
    wait_for(
        lambda: Scan.dangerously_unscoped.filter(
            pk=scan.pk, status__in=[ScanStatus.SUCCEEDED, ScanStatus.ERRORED]
        ).exists(),
        120,
        "the worker to finish the scan",
    )
    # The task is over (its alerts queued) once it has freed the target's origin.
    wait_for(lambda: not OriginLock.objects.exists(), 60, "the worker to free the origin")
    scan.refresh_from_db()
    assert scan.status == ScanStatus.SUCCEEDED, scan.error_reason
    return scan


def _move_back(endpoint, by: timedelta) -> None:
    Scan.dangerously_unscoped.filter(endpoint=endpoint).update(
        queued_at=F("queued_at") - by, started_at=F("started_at") - by, finished_at=F("finished_at") - by
    )
    CheckResult.dangerously_unscoped.filter(endpoint=endpoint).update(measured_at=F("measured_at") - by)


def _mails(folder: Path) -> list[email.message.Message]:
    """What Django's file backend wrote: each message's bytes, then a line of 79 dashes."""
    return [
        email.message_from_bytes(block.strip())
        for path in sorted(folder.glob("*.log"))
        for block in path.read_bytes().split(b"-" * 79)
        if block.strip()
    ]


def _slo_mails(folder: Path) -> list[email.message.Message]:
    return [m for m in _mails(folder) if ": slo " in str(m["Subject"])]


@pytest.fixture
def mail_dir(tmp_path) -> Path:
    folder = tmp_path / "mail"
    folder.mkdir()
    return folder


def test_an_endpoint_missing_its_ttft_target_on_every_scan_is_breaching_and_pages(
    browser, live_server, mail_dir
):
    world = build_world()
    app.control.purge()  # nothing another test left in the queue reaches this worker
    env = worker_env(
        DJANGO_SETTINGS_MODULE="tests.helpers.mail_capture_settings", TOKVERA_TEST_MAIL_DIR=str(mail_dir)
    )
    with (
        running_target(TargetConfig(ttft_ms=300, itl_ms=2, tokens=8)) as (host, port),
        webhook_receiver() as (hook_url, received),
    ):
        endpoint = make_endpoint(
            world.team,
            name="slow first token",
            model=MODEL_ID,
            base_url=f"http://{host}:{port}/v1",
            levels=[1],
            requests_per_level=3,
            slo_ttft_p95_ms=100,
            slo_grade_floor="F",
            slo_objective=0.9,
            interval_minutes=60,
            webhook_url=hook_url,
        )
        worker = workers.start(env=env, log=mail_dir.parent / "worker.log")
        try:
            scans = []
            for i in range(SCANS):
                scans.append(_scan_once(endpoint))
                if i < SCANS - 1:
                    _move_back(endpoint, INTERVAL)
            wait_for(lambda: received, 60, "the webhook")
            page_mail = wait_for(lambda: _slo_mails(mail_dir), 60, "the SLO mail")
        finally:
            stop(worker)
        ttfts = [
            CheckResult.dangerously_unscoped.get(scan=s, check_id="ttft_p95_at_concurrency_1").value
            for s in scans
        ]
    assert all(ttft > 100 for ttft in ttfts), ttfts  # every scan missed its TTFT target

    # One page, by mail to the owners and admins and by the signed webhook.
    (message,) = page_mail
    assert message["Subject"] == "[Tokvera] slow first token: slo breaching"
    assert {world.owner.email, world.admin.email} <= set(message["To"].replace(" ", "").split(","))
    body = message.get_payload(decode=True).decode("utf-8")
    assert "over the last 6 h and 10.0× over the last 30 min (page at 6× or more)" in body
    assert f"/endpoints/{endpoint.public_id}/#slo" in body
    (hook,) = [json.loads(raw) for _, raw in received]
    assert hook["event"] == "slo_breaching" and hook["slo"]["status"] == "breaching"
    assert hook["slo"]["good_share_of_covered"] == 0
    assert [f["windows"] for f in hook["slo"]["firing"]] == ["6 h and 30 min"]
    assert Endpoint.dangerously_unscoped.get(pk=endpoint.pk).slo_burn_alert == "page"

    for width in (DESKTOP, PHONE):
        page, refused = logged_in_page(browser, live_server, world.owner, width)

        page.goto(f"{live_server.url}/teams/{world.team.slug}/")
        cell = page.locator(f"tr[data-endpoint='{endpoint.public_id}'] td.slo")
        status = cell.locator("[data-slo]")
        assert status.inner_text() == "breaching"
        assert status.evaluate("e => getComputedStyle(e).color") == RED
        assert "meets" not in cell.inner_text() and "meeting" not in cell.inner_text()
        assert "0.0% of the covered time good (objective 90.0%)" in cell.inner_text()
        # on a phone the table scrolls sideways: the status rides with the endpoint's name
        inline = page.locator(f"tr[data-endpoint='{endpoint.public_id}'] [data-slo-inline]")
        assert inline.is_visible() == (width == PHONE)
        if width == PHONE:
            assert inline.inner_text() == "breaching"
            assert inline.evaluate("e => getComputedStyle(e).color") == RED
        page.screenshot(path=str(ARTIFACTS / f"slo-breaching-dashboard-{width}.png"), full_page=True)

        page.goto(f"{live_server.url}/endpoints/{endpoint.public_id}/#slo")
        for days in (7, 30):
            window = page.locator(f'#slo .window[data-days="{days}"]')
            status = window.locator("[data-slo]")
            assert status.inner_text() == "breaching"
            assert status.evaluate("e => getComputedStyle(e).color") == RED
            text = window.inner_text()
            assert "meets" not in text and "0.0% of the covered time met every target" in text
            assert f"of the {days} days, counted neither good nor bad" in text
            budget = window.locator("[data-budget-text]")
            assert budget.evaluate("e => getComputedStyle(e).color") != GREEN
            assert int(budget.evaluate("e => getComputedStyle(e).fontWeight")) < 600
            firing = window.locator('[data-pair="21600-1800"]')
            assert firing.get_attribute("data-firing") == "yes"
            # the SLO card fits the phone: nothing in it wider than the viewport
            box = window.bounding_box()
            assert box is not None and box["x"] + box["width"] <= width
        page.locator("#slo").screenshot(path=str(ARTIFACTS / f"slo-breaching-endpoint-{width}.png"))
        assert refused == []
        page.context.close()


AMBER, GREY = "rgb(138, 106, 0)", "rgb(92, 100, 120)"  # .slo-at_risk, --muted


def test_each_status_has_its_word_and_colour_on_the_dashboard_and_the_endpoint_page(browser, live_server):
    from django.utils import timezone

    from tests.scans.conftest import CAPPED_D, GRADE_A, bulk_scans, scan_at

    world = build_world()
    now = timezone.now()
    hour = timedelta(hours=1)
    down = make_endpoint(world.team, name="always down", interval_minutes=5, slo_objective=0.99)
    for minutes in range(37, 0, -5):
        Scan.dangerously_unscoped.filter(pk=scan_at(down, now - timedelta(minutes=minutes)).pk).update(
            down=True, grade="", points=None
        )
    # one bad hour in three over the last day of a covered week: 3.3x over 24 h and 2 h
    slow = make_endpoint(world.team, name="slow burn", interval_minutes=60)
    bulk_scans(slow, now - timedelta(days=7), 144, hour, grades=("A",))
    bulk_scans(slow, now - timedelta(days=7) + 144 * hour, 23, hour, grades=("A", "A", "D"))
    scan_at(slow, now - hour, CAPPED_D)
    healthy = make_endpoint(world.team, name="healthy", interval_minutes=60)
    for hours in (3, 2, 1):
        scan_at(healthy, now - hours * hour, GRADE_A)
    new = make_endpoint(world.team, name="brand new", interval_minutes=5)
    scan_at(new, now - timedelta(minutes=4), GRADE_A)
    expected = {
        down: ("breaching", RED),
        slow: ("at risk", AMBER),
        healthy: ("meeting", GREEN),
        new: ("too little data yet", GREY),
    }

    page, refused = logged_in_page(browser, live_server, world.owner, DESKTOP)
    page.goto(f"{live_server.url}/teams/{world.team.slug}/")
    for endpoint, (word, colour) in expected.items():
        status = page.locator(f"tr[data-endpoint='{endpoint.public_id}'] td.slo [data-slo]")
        assert (status.inner_text(), status.evaluate("e => getComputedStyle(e).color")) == (word, colour), (
            endpoint.name
        )
    page.screenshot(path=str(ARTIFACTS / "slo-statuses-dashboard.png"), full_page=True)

    for endpoint, (word, colour) in expected.items():
        page.goto(f"{live_server.url}/endpoints/{endpoint.public_id}/#slo")
        status = page.locator('#slo .window[data-days="7"] [data-slo]')
        assert (status.inner_text(), status.evaluate("e => getComputedStyle(e).color")) == (word, colour), (
            endpoint.name
        )
    assert refused == []
