"""--stop-on-saturation: a closed-loop level stops early when the server falls behind, the
levels after it are skipped with the reason, and without the option nothing stops."""

from __future__ import annotations

from scans.grader import run_scan
from scans.grader.demo_server import TargetConfig, running_target
from scans.grader.measurement import RequestRecord
from scans.grader.report import report_from_measurement
from scans.grader.report_text import saturation_lines
from scans.grader.saturation import ERROR_BURST_WINDOW, SaturationWatch
from tests.helpers.servers import (
    END_CHUNKS,
    SSE_HEAD,
    good_stream,
    http_chunk,
    json_response,
    plan_for,
    raw_server,
    read_request,
    validate_report,
)


def failing_after(good: int):
    """A keep-alive server whose first `good` chat requests succeed and every later one is
    answered 500: a server that has fallen over."""
    counter = {"n": 0}

    async def handler(reader, writer) -> None:
        while True:
            head, _ = await read_request(reader)
            if b"/chat/completions" not in head.split(b"\r\n")[0]:
                writer.write(json_response(404, {"error": "not found"}))
                await writer.drain()
                continue
            counter["n"] += 1
            if counter["n"] <= good:
                writer.write(SSE_HEAD + http_chunk(good_stream()) + END_CHUNKS)
            else:
                writer.write(json_response(500, {"error": "overloaded"}))
            await writer.drain()

    return handler


def test_an_error_burst_stops_the_level_and_skips_the_later_ones():
    # The probe and 4 requests succeed; from the 5th on every request fails.
    with raw_server(failing_after(5)) as port:
        plan = plan_for(port, levels=(1, 2, 4), requests=20, stop_on_saturation=True)
        m = run_scan(plan)
    assert len(m.levels) == 1
    level = m.levels[0]
    assert level.stopped_early == {"reason": "error_burst", "after_requests": 10,
                                   "detail": "6 of the last 10 requests failed"}
    # What was sent counts as it ended: its failures included.
    assert len(level.requests) == 10 and level.failed_by_class == {"http_status_500": 6}
    assert [s["concurrency"] for s in m.skipped_levels] == [2, 4]
    report = report_from_measurement(plan, m)
    validate_report(report)
    assert report["plan"]["stop_on_saturation"] is True
    assert report["levels"][0]["stopped_early"]["reason"] == "error_burst"
    assert report["levels"][0]["requests"] == 10
    assert report["skipped_levels"][0] == {
        "phase": "level", "concurrency": 2, "rate_per_s": None,
        "reason": "concurrency 1 stopped early: error_burst"}
    check = next(c for c in report["checks"] if c["id"] == "error_rate")
    assert check["value"] == 0.6  # the failures are not hidden
    assert saturation_lines(report) == [
        "concurrency 1 stopped early after 10 requests: error burst (6 of the last 10 "
        "requests failed)",
        "skipped: concurrency 2, concurrency 4 (concurrency 1 stopped early: error_burst)"]


def test_without_the_option_nothing_stops():
    with raw_server(failing_after(5)) as port:
        plan = plan_for(port, levels=(1, 2, 4), requests=20)
        m = run_scan(plan)
    assert [len(level.requests) for level in m.levels] == [20, 20, 20]
    assert all(level.stopped_early is None for level in m.levels) and not m.skipped_levels
    report = report_from_measurement(plan, m)
    assert "skipped_levels" not in report and "stop_on_saturation" not in report["plan"]
    assert all("stopped_early" not in entry for entry in report["levels"])
    assert saturation_lines(report) == []


def test_a_target_that_fails_everything_stops_at_the_first_level():
    with running_target(TargetConfig(ttft_ms=1, itl_ms=1, tokens=4, error_rate=1.0)) as (
            _, port):
        plan = plan_for(port, levels=(1, 4), requests=(12, 16), stop_on_saturation=True)
        m = run_scan(plan)
    assert m.levels[0].stopped_early["reason"] == "error_burst"
    assert m.levels[0].stopped_early["after_requests"] == ERROR_BURST_WINDOW
    assert [s["concurrency"] for s in m.skipped_levels] == [4]


def _record(ttft_ms: float | None, failed: bool = False) -> RequestRecord:
    record = RequestRecord(level=1, index=0, body_written_at=0.0)
    if failed:
        record.failure = "timeout"
    elif ttft_ms is not None:
        record.first_output_at = ttft_ms / 1000.0
    return record


def test_a_growing_queue_is_named_once_ttft_rose_over_four_waves():
    watch = SaturationWatch(concurrency=4)
    stops = [watch.completed(_record(t)) for t in
             [10] * 4 + [20] * 4 + [30] * 4 + [40] * 4]
    assert stops == [None] * 16  # four waves: not enough to say
    stops = [watch.completed(_record(50)) for _ in range(4)]
    assert stops[:3] == [None] * 3
    assert stops[3]["reason"] == "queue_growth" and stops[3]["after_requests"] == 20


def test_a_flat_ttft_is_no_growing_queue():
    watch = SaturationWatch(concurrency=4)
    assert all(watch.completed(_record(t)) is None for t in [10, 12, 11, 9] * 10)
