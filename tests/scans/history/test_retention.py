"""Report retention and rollups: a scan past REPORT_RETENTION_DAYS keeps
its summary and every page still reads it; long chart ranges read hourly and daily rollups
and draw the same series as the scans themselves; the pruning pass takes row locks only."""

from __future__ import annotations

import copy
import html
import json
import os
import subprocess
import sys
import threading
from datetime import timedelta
from io import StringIO

import psycopg
import pytest
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from accounts.tenancy import UnscopedQuery
from scans.history import retention, rollups
from scans.history.check_results import check_history
from scans.history.grades import grade_history
from scans.history.headlines import HEADLINE_FIGURES, headline_history
from scans.models import (
    CheckResult,
    CheckRollup,
    PushedReportBody,
    RollupWatermark,
    Scan,
    ScanRollup,
    ScanStatus,
    ScanTrigger,
)
from scans.running import worker as scan_worker
from scans.status_pages.settings import page_of, save_settings
from tests.conftest import clear_cache
from tests.helpers.factories import make_endpoint, make_report, measured_report
from tests.helpers.paths import ROOT
from tests.scans.conftest import CAPPED_C, GRADE_A, GRADE_B, scan_at

pytestmark = pytest.mark.django_db


def _age(scan: Scan, days: float) -> Scan:
    """Move a stored scan `days` into the past (queued, finished, its check results)."""
    when = timezone.now() - timedelta(days=days)
    Scan.dangerously_unscoped.filter(pk=scan.pk).update(queued_at=when, started_at=when,
                                                        finished_at=when)
    CheckResult.dangerously_unscoped.filter(scan_id=scan.pk).update(measured_at=when)
    scan.refresh_from_db()
    return scan


def _real_report() -> dict:
    """A report from a real scan of `tokvera target` on loopback, with GPU samples and a
    capacity-search level added (the other per-sample lists a report can carry)."""
    report = copy.deepcopy(measured_report())
    report["measurements"]["gpu_samples"] = [{"t_s": i, "utilization": 0.5} for i in range(30)]
    report["search_levels"] = [copy.deepcopy(report["levels"][-1])]
    report["trace_replay"] = {**copy.deepcopy(report["levels"][-1]), "shape": "mooncake"}
    return report


# --- the summary and the pass ------------------------------------------------------------------


def test_an_old_scan_keeps_the_summary_sql_and_python_agree_on(world):
    endpoint = make_endpoint(world.team)
    report = _real_report()
    assert report["levels"][0]["request_timelines"] and report["levels"][0]["ttft_samples_ms"]
    scan = _age(scan_at(endpoint, timezone.now()), 91)
    Scan.dangerously_unscoped.filter(pk=scan.pk).update(report=report)

    result = retention.prune()

    scan.refresh_from_db()
    assert result.scans == 1 and scan.report_pruned_at is not None
    assert scan.report == retention.summary_of(report)
    for name in ("levels", "search_levels"):
        assert all("request_timelines" not in lv and "ttft_samples_ms" not in lv
                   for lv in scan.report[name])
    assert "gpu_samples" not in scan.report["measurements"]
    trace = scan.report["trace_replay"]  # a replayed trace is one level of its own
    assert "request_timelines" not in trace and "ttft_samples_ms" not in trace
    assert trace["shape"] == "mooncake" and trace["ttft_ms"] == report["trace_replay"]["ttft_ms"]
    # what the site reads stays: score, checks, each level's figures, plan, target, preflight
    for key in ("score", "checks", "plan", "target", "preflight"):
        assert scan.report[key] == report[key]
    assert scan.report["levels"][0]["ttft_ms"] == report["levels"][0]["ttft_ms"]
    samples = sum(len(json.dumps(lv[k])) for lv in report["levels"] for k in retention.LEVEL_SAMPLES)
    assert len(json.dumps(scan.report)) < len(json.dumps(report)) - samples


def test_the_pass_prunes_only_scans_past_retention_in_batches_and_is_idempotent(world, settings):
    settings.REPORT_RETENTION_DAYS = 30
    endpoint = make_endpoint(world.team)
    old = [_age(scan_at(endpoint, timezone.now(), GRADE_A), 31 + i) for i in range(5)]
    recent = [_age(scan_at(endpoint, timezone.now(), GRADE_B), 29 - i) for i in range(2)]
    pushed = old[0]
    Scan.dangerously_unscoped.filter(pk=pushed.pk).update(pushed=True, report_digest="ab" * 32)
    PushedReportBody.dangerously_unscoped.create(scan=pushed, body=b"{}")
    errored = _age(scan_at(endpoint, timezone.now(), status=ScanStatus.ERRORED), 60)

    result = retention.prune(batch=2)

    assert (result.scans, result.bodies, result.batches) == (5, 1, 3)
    assert Scan.dangerously_unscoped.filter(report_pruned_at__isnull=False).count() == 5
    assert all(Scan.dangerously_unscoped.get(pk=s.pk).report_pruned_at is None
               for s in [*recent, errored])
    assert not PushedReportBody.dangerously_unscoped.filter(scan=pushed).exists()
    assert Scan.dangerously_unscoped.get(pk=pushed.pk).report_digest == "ab" * 32  # kept
    assert CheckResult.dangerously_unscoped.filter(scan__in=old).count() == 5 * 10
    assert retention.prune().scans == 0  # twice: nothing more


def test_the_command_runs_the_pass_and_says_what_it_did(world):
    endpoint = make_endpoint(world.team)
    _age(scan_at(endpoint, timezone.now()), 200)
    out = StringIO()

    call_command("prune_reports", "--batch", "10", stdout=out)

    text = out.getvalue()
    assert "kept 90 days (REPORT_RETENTION_DAYS)" in text
    assert "pruned 1 scan reports to summaries" in text and "in 1 batches" in text


def test_a_retention_of_zero_days_is_refused_at_start_with_the_setting_named():
    env = {**os.environ, "REPORT_RETENTION_DAYS": "0",
           "DJANGO_SETTINGS_MODULE": "tokvera_site.settings"}
    done = subprocess.run([sys.executable, "-c", "import django; django.setup()"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=60)

    assert done.returncode == 2
    assert "REPORT_RETENTION_DAYS=0 is not valid" in done.stderr


@pytest.mark.django_db(transaction=True)
def test_the_pass_skips_a_row_another_transaction_holds_and_blocks_no_insert(world):
    endpoint = make_endpoint(world.team)
    held, free = (_age(scan_at(endpoint, timezone.now()), 100 + i) for i in range(2))
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    other = psycopg.connect(**params)
    try:
        other.execute("SELECT id FROM scans_scan WHERE id = %s FOR UPDATE", [held.pk])

        result = retention.prune()  # would wait forever on the held row without SKIP LOCKED

        assert result.scans == 1
        assert Scan.dangerously_unscoped.get(pk=free.pk).report_pruned_at is not None
        # Inserts and updates elsewhere go on while the pass holds its rows: a batch holds
        # only its own rows (the other connection inserts a scan and updates another).
        inserted = threading.Event()

        def insert():
            with psycopg.connect(**params, autocommit=True) as conn:
                conn.execute("UPDATE scans_scan SET error_reason = 'touched' WHERE id = %s",
                             [free.pk])
                inserted.set()

        writer = threading.Thread(target=insert)
        writer.start()
        writer.join(timeout=30)
        assert inserted.is_set()
    finally:
        other.rollback()
        other.close()
    assert retention.prune().scans == 1  # the released row, at the next pass


# --- every page of a pruned scan ---------------------------------------------------------------


@pytest.fixture
def owner_client(world) -> Client:
    client = Client()
    client.force_login(world.owner)
    return client


def test_every_page_and_api_of_a_pruned_scan_still_answers(world, owner_client, api):
    endpoint = make_endpoint(world.team)
    earlier = _age(scan_at(endpoint, timezone.now(), GRADE_B), 120)
    scan = _age(scan_at(endpoint, timezone.now(), CAPPED_C), 100)
    retention.prune()
    scan.refresh_from_db()
    assert scan.report_pruned_at is not None and earlier.pk

    page = owner_client.get(reverse("scan-detail", args=[scan.public_id]))
    body = page.content.decode()
    assert page.status_code == 200
    assert html.escape(retention.pruned_sentence(90)) in body
    assert "removed after 90 days" in body
    assert "capped from B" in body and "87.0 points" in body  # the grade stays
    assert 'data-check="ttft_p95_at_concurrency_1"' in body  # every check, with its value
    assert '<tr data-level="1">' in body  # each level's figures
    assert "<iframe" not in body
    assert reverse("scan-report-html", args=[scan.public_id]) not in body

    gone = owner_client.get(reverse("scan-report-html", args=[scan.public_id]))
    assert gone.status_code == 410 and gone.content.decode() == retention.pruned_sentence()

    compare = owner_client.get(reverse("scan-compare", args=[scan.public_id]))
    assert compare.status_code == 200 and "ttft_p95_at_concurrency_1" in compare.content.decode()
    assert owner_client.get(reverse("endpoint-detail", args=[endpoint.public_id])).status_code == 200
    assert owner_client.get(reverse("team-dashboard", args=[world.team.slug])).status_code == 200
    badge = Client().get(reverse("badge-json", args=[endpoint.badge_key]))
    assert badge.status_code == 200 and "C" in badge.content.decode()
    clear_cache()
    page_settings = page_of(world.team)
    save_settings(page_settings, enabled=True, slug=page_settings.slug, title="S",
                              shown=[(endpoint, "")])
    assert Client().get(f"/status/{page_settings.slug}/").status_code == 200
    clear_cache()

    api.force_authenticate(world.owner)
    detail = api.get(reverse("api-scan-detail", kwargs={"public_id": scan.public_id}))
    assert detail.status_code == 200 and detail.json()["report_pruned_at"]
    assert detail.json()["grade"] == "C"
    report = api.get(reverse("api-scan-report", kwargs={"public_id": scan.public_id}))
    assert report.status_code == 410
    assert report.json()["detail"] == retention.pruned_sentence()
    assert (parse_datetime(report.json()["report_pruned_at"])
            == parse_datetime(detail.json()["report_pruned_at"]) == scan.report_pruned_at)
    hist = api.get(reverse("api-endpoint-history", kwargs={"public_id": endpoint.public_id}),
                   {"check": "ttft_p95_at_concurrency_1",
                    "since": (timezone.now() - timedelta(days=200)).isoformat()})
    assert hist.status_code == 200 and [p["value"] for p in hist.json()["points"]] == [210.0,
                                                                                       2500.0]
    # and a scan not pruned still downloads
    fresh = scan_at(endpoint, timezone.now(), GRADE_A)
    assert owner_client.get(reverse("scan-report-html", args=[fresh.public_id])).status_code == 200


def test_an_outsider_still_gets_404_for_a_pruned_scan(world):
    endpoint = make_endpoint(world.team)
    scan = _age(scan_at(endpoint, timezone.now()), 100)
    retention.prune()
    client = Client()
    client.force_login(world.outsider)

    for name in ("scan-detail", "scan-report-html"):
        assert client.get(reverse(name, args=[scan.public_id])).status_code == 404


# --- rollups -------------------------------------------------------------------------------------

GRADES = [("A", 95.0, "A"), ("B", 85.2, "B"), ("C", 87.0, "B"), ("F", 30.0, "F"),
          ("insufficient_evidence", None, ""), ("", None, "")]  # (grade, points, uncapped)


def _history_of(endpoint, hours: int, step_minutes: int, *, versions=("0.9.0",)) -> None:
    """Scans every `step_minutes` over the last `hours`, each with its report, grade and
    check rows as the worker stores them: grades, figures and values vary, a stretch has
    another scoring version and another URL, some scans are down or provisional."""
    now = timezone.now()
    count = hours * 60 // step_minutes
    base = make_report()
    rows = []
    for i in range(count):
        grade, points, uncapped = GRADES[i % len(GRADES)]
        report = copy.deepcopy(base)
        report["levels"][0]["ttft_ms"]["p50"] = 150.0 + (i * 7) % 90
        report["levels"][0]["ttft_ms"]["p95"] = 200.0 + (i * 11) % 130
        report["levels"][0]["generation_rate"]["median"] = 40.0 + (i * 3) % 17
        if i % 9 == 0:
            report["levels"][0]["ttft_ms"]["p95"] = None
        if count // 3 < i < count // 2:
            report["target"]["base_url"] = "http://127.0.0.1:9090/v1"
        rows.append(Scan(endpoint=endpoint, trigger=ScanTrigger.SCHEDULE,
                         status=ScanStatus.SUCCEEDED, report=report, grade=grade,
                         points=points, uncapped_grade=uncapped,
                         scoring_version=versions[(i * len(versions)) // count],
                         provisional=i % 4 == 0, down=grade == "",
                         **scan_worker.report_columns(report)))
    scans = Scan.dangerously_unscoped.bulk_create(rows)
    with connection.cursor() as cursor:  # queued_at is auto_now_add: the times, in one go
        cursor.execute(
            "UPDATE scans_scan SET queued_at = %s + (id - %s) * %s * interval '1 minute', "
            "finished_at = %s + (id - %s) * %s * interval '1 minute' + interval '40 seconds' "
            "WHERE endpoint_id = %s",
            [now - timedelta(hours=hours), scans[0].pk, step_minutes,
             now - timedelta(hours=hours), scans[0].pk, step_minutes, endpoint.pk])
    statuses = ["pass", "warn", "fail", "insufficient_evidence", "preview"]
    finished = dict(Scan.dangerously_unscoped.filter(endpoint=endpoint)
                    .values_list("pk", "finished_at"))
    CheckResult.dangerously_unscoped.bulk_create(
        CheckResult(scan=s, partition_month=s.partition_month, endpoint=endpoint,
                    check_id=check_id,
                    value=None if (i + k) % 7 == 0 else float((i * (k + 3)) % 500),
                    status=statuses[(i + k) % len(statuses)], counted=True,
                    measured_at=finished[s.pk], scoring_version=s.scoring_version)
        for i, s in enumerate(scans)
        for k, check_id in enumerate(("ttft_p95_at_concurrency_1", "error_rate"))
    )


def _series(endpoint, since, until, max_points=60):
    grades = [p.as_dict() for p in grade_history(endpoint, since, until, max_points)]
    checks = [p.as_dict() for p in check_history(
        endpoint, "ttft_p95_at_concurrency_1", since, until, max_points)]
    heads = [(p.at, p.last_at, p.scans, p.figures)
             for p in headline_history(endpoint, since, until, max_points)]
    return grades, checks, heads


def _same(a, b):
    """Equal, figures within rounding (float sums in another order)."""
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        if isinstance(x, dict):
            assert x.keys() == y.keys()
            for k in x:
                _same_value(x[k], y[k], k)
        else:
            for i, (u, v) in enumerate(zip(x, y, strict=True)):
                _same_value(u, v, i)


def _same_value(u, v, where):
    if isinstance(u, dict):
        assert u.keys() == v.keys(), where
        for k in u:
            _same_value(u[k], v[k], k)
    elif isinstance(u, float) and isinstance(v, float):
        assert abs(u - v) <= 0.051, (where, u, v)
    else:
        assert u == v, (where, u, v)


def test_rollups_read_the_headline_figures_where_history_reads_them():
    assert rollups.FIGURE_COLUMNS == HEADLINE_FIGURES
    assert rollups.FIGURE_PATHS.keys() == HEADLINE_FIGURES.keys()


def test_long_ranges_read_hourly_rollups_and_draw_the_series_the_scans_draw(world):
    endpoint = make_endpoint(world.team)
    _history_of(endpoint, hours=10 * 24, step_minutes=50, versions=("0.9.0", "1.0.0"))
    now = timezone.now()
    since, until = now - timedelta(days=9, minutes=17), now
    raw = _series(endpoint, since, until)  # no rollup pass yet: scans only
    assert not ScanRollup.dangerously_unscoped.exists()

    rollups.roll_up(now=now)
    span = rollups.long_range(since, until, 3600 * 5)
    assert span is not None and span.step_s == 3600 and span.since.minute == 0
    assert span.rolled_until > until - timedelta(hours=2)  # nearly all of it from rollups
    assert ScanRollup.dangerously_unscoped.filter(endpoint=endpoint, period="hour").count() > 200
    assert CheckRollup.dangerously_unscoped.filter(endpoint=endpoint, period="hour").exists()

    rolled = _series(endpoint, since, until)

    for a, b in zip(raw, rolled, strict=True):
        assert len(a) > 20
        _same(a, b)
    grades = raw[0]
    assert {p["scoring_version"] for p in grades} == {"0.9.0", "1.0.0"}
    assert {p["url"] for p in grades} == {"http://127.0.0.1:8080/v1", "http://127.0.0.1:9090/v1"}
    assert sum(p["down"] for p in grades) and sum(p["capped"] for p in grades)


def test_ranges_of_many_months_read_daily_rollups_with_the_same_series(world):
    endpoint = make_endpoint(world.team)
    _history_of(endpoint, hours=215 * 24, step_minutes=20 * 60)
    now = timezone.now()
    since = now - timedelta(days=210, hours=5)
    raw = _series(endpoint, since, now, max_points=100)

    rollups.roll_up(now=now)
    span = rollups.long_range(since, now, 86400 * 2)
    assert span is not None and span.step_s == 86400 and span.days_until > since
    assert ScanRollup.dangerously_unscoped.filter(endpoint=endpoint, period="day").count() > 200

    for a, b in zip(raw, _series(endpoint, since, now, max_points=100), strict=True):
        _same(a, b)


def test_hourly_rollups_past_retention_go_and_a_range_reaching_them_is_drawn_in_days(
        world, settings):
    settings.HOURLY_ROLLUP_RETENTION_DAYS = 20
    endpoint = make_endpoint(world.team)
    _history_of(endpoint, hours=40 * 24, step_minutes=5 * 60)
    now = timezone.now()
    rollups.roll_up(now=now)
    kept_since = rollups.hours_kept_since(now)
    assert kept_since.hour == 0 and kept_since <= now - timedelta(days=20)
    hours = ScanRollup.dangerously_unscoped.filter(endpoint=endpoint, period="hour")
    days = list(ScanRollup.dangerously_unscoped.filter(endpoint=endpoint, period="day")
                .order_by("bucket_start").values_list("bucket_start", "scans"))
    assert hours.filter(bucket_start__lt=kept_since).count() > 50

    deleted = rollups.prune_hours(now=now, batch=37)  # several batches
    assert deleted > 50 and rollups.prune_hours(now=now) == 0  # a second pass deletes nothing
    assert not hours.filter(bucket_start__lt=kept_since).exists()
    assert not CheckRollup.dangerously_unscoped.filter(
        endpoint=endpoint, period="hour", bucket_start__lt=kept_since).exists()
    assert hours.filter(bucket_start__gte=kept_since).count() > 50  # the recent hours stay
    assert list(ScanRollup.dangerously_unscoped.filter(endpoint=endpoint, period="day")
                .order_by("bucket_start").values_list("bucket_start", "scans")) == days

    # 30 days in 120 points would be 6-hour buckets: it starts before the hours kept, so it is
    # drawn in whole days, from the daily rows where the hours are gone, as scans draw it.
    since = now - timedelta(days=30)
    span = rollups.long_range(since, now, 6 * 3600)
    assert span is not None and span.step_s == 86400
    rolled = _series(endpoint, since, now, max_points=120)
    assert all(p["at"] >= span.since for p in rolled[0])
    # a point a UTC day of each series (the history changes URL for a stretch)
    assert all(p["at"].date() == p["last_at"].date() for p in rolled[0])
    assert len({(p["at"].date(), p["url"]) for p in rolled[0]}) == len(rolled[0])
    RollupWatermark.objects.all().delete()  # scans only, for the reference
    for a, b in zip(rolled, _series(endpoint, since, now, max_points=120), strict=True):
        assert len(a) >= 25
        _same(a, b)
    # A range within the hours kept still reads hourly buckets.
    assert rollups.long_range(now - timedelta(days=10), now, 3 * 3600).step_s == 3600


def test_a_late_scan_in_an_old_hour_is_counted_after_the_next_pass(world):
    endpoint = make_endpoint(world.team)
    _history_of(endpoint, hours=10 * 24, step_minutes=180)
    now = timezone.now()
    since = now - timedelta(days=9)
    rollups.roll_up(now=now)
    before = sum(p.scans for p in grade_history(endpoint, since, now, 50))

    # Queued five days ago, finished now (a long scan, or a report pushed late).
    late = scan_at(endpoint, now - timedelta(days=5), GRADE_A)
    Scan.dangerously_unscoped.filter(pk=late.pk).update(finished_at=now)
    CheckResult.dangerously_unscoped.filter(scan=late).update(
        measured_at=now - timedelta(days=5))
    # Before the next pass the rolled hours may or may not show it yet (that depends on where
    # the range's hours fall against the wall clock); after it, they must.
    rollups.roll_up(now=now + timedelta(minutes=5))

    rolled = _series(endpoint, since, now, 50)
    assert sum(p["scans"] for p in rolled[0]) == before + 1
    RollupWatermark.objects.all().delete()  # scans only, for the reference
    _same(rolled[0], _series(endpoint, since, now, 50)[0])
    _same(rolled[1], _series(endpoint, since, now, 50)[1])


def test_a_second_pass_changes_no_rollup(world):
    endpoint = make_endpoint(world.team)
    _history_of(endpoint, hours=2 * 24, step_minutes=60)
    now = timezone.now()
    rollups.roll_up(now=now)

    def snapshot():
        return (sorted(ScanRollup.dangerously_unscoped.values_list(
                    "period", "bucket_start", "scoring_version", "target_url", "scans",
                    "points_sum", "worst_grade", "down", "ttft_p95_sum", "ttft_p95_n")),
                sorted(CheckRollup.dangerously_unscoped.values_list(
                    "check_id", "period", "bucket_start", "scans", "value_sum", "failed")))

    first = snapshot()
    RollupWatermark.objects.update(until=now - timedelta(days=3))  # read it all again
    rollups.roll_up(now=now)

    assert snapshot() == first


def test_rollup_rows_belong_to_their_team(world):
    mine = make_endpoint(world.team)
    theirs = make_endpoint(world.other_team, name="theirs")
    _history_of(mine, hours=10, step_minutes=60)
    _history_of(theirs, hours=10, step_minutes=60)
    rollups.roll_up()

    with pytest.raises(UnscopedQuery):
        ScanRollup.objects.count()
    assert set(ScanRollup.objects.for_team(world.team).values_list("endpoint", flat=True)) == {
        mine.pk}
    assert set(CheckRollup.objects.for_team(world.other_team).values_list(
        "endpoint", flat=True)) == {theirs.pk}
