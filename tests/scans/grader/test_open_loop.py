"""Issue 22, item 3: open-loop rate levels (`--rate`, `--arrival`, `--max-connections`), against
real loopback servers: a raw asyncio server that notes when each request reached it (its own
clock), and the reference target. Rate levels are measured, never graded."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import statistics
import time
from pathlib import Path

import pytest

from scans.grader import ScanPlan, run_scan
from scans.grader.demo_server import TargetConfig, serving_target
from scans.grader.objective import parse_slo
from scans.grader.openloop import (
    MIN_RATE_REQUESTS,
    Arrival,
    OpenLoop,
    arrival_offsets,
    parse_arrival,
)
from scans.grader.proof import prove
from scans.grader.report import regrade, report_from_measurement
from scans.grader.report_html import render_html
from scans.grader.report_text import rate_rows
from tests.helpers.servers import (
    END_CHUNKS,
    SSE_HEAD,
    good_stream,
    http_chunk,
    json_response,
    raw_server,
    read_request,
)
from tests.helpers.servers import validate_report as validate
from tokvera_site.cli import main

FAST = TargetConfig(ttft_ms=5, itl_ms=1, tokens=4)


def _arrivals_server(arrivals: list[float]):
    """Answers every chat request at once with a short stream, noting on its own clock when
    each request had fully arrived (head and body read)."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                head, _ = await read_request(reader)
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            if b"/chat/completions" not in head.split(b"\r\n")[0]:
                writer.write(json_response(404, {"error": "not found"}))
                await writer.drain()
                continue
            arrivals.append(time.perf_counter())
            writer.write(SSE_HEAD + http_chunk(good_stream(3)) + END_CHUNKS)
            await writer.drain()

    return handler


def _plan(url: str, open_loop: OpenLoop, **kwargs) -> ScanPlan:
    return ScanPlan(
        base_url=url,
        model="tokvera-target",
        levels=(1,),
        requests=3,
        timeout_s=10,
        max_tokens=16,
        open_loop=open_loop,
        **kwargs,
    )


# -- the schedule ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "arrival",
    [Arrival("constant", None), Arrival("poisson", 1.0), Arrival("gamma", 0.25), Arrival("gamma", 4.0)],
)
def test_the_last_of_n_requests_is_due_n_over_the_rate_after_the_start(arrival):
    offsets = arrival_offsets(arrival, 8.0, 40)
    assert len(offsets) == 40
    assert offsets[-1] == pytest.approx(40 / 8.0)
    assert all(b >= a for a, b in zip(offsets, offsets[1:], strict=False))
    assert offsets == arrival_offsets(arrival, 8.0, 40)  # seeded: the same schedule again


def test_burstiness_spreads_the_gaps_as_vllm_defines_it():
    def spread(arrival: Arrival) -> float:  # coefficient of variation of the gaps
        offsets = arrival_offsets(arrival, 100.0, 4000)
        gaps = [b - a for a, b in zip([0.0, *offsets], offsets, strict=False)]
        return statistics.pstdev(gaps) / statistics.fmean(gaps)

    constant = spread(Arrival("constant", None))
    bursty, poisson, steady = (
        spread(Arrival("gamma", 0.25)),
        spread(Arrival("poisson", 1.0)),
        spread(Arrival("gamma", 4.0)),
    )
    assert constant == pytest.approx(0.0, abs=1e-9)
    # the gaps' CV is 1 / sqrt(B): 2 for B = 0.25, 1 for Poisson, 0.5 for B = 4
    assert bursty == pytest.approx(2.0, rel=0.15)
    assert poisson == pytest.approx(1.0, rel=0.1)
    assert steady == pytest.approx(0.5, rel=0.1)


def test_another_seed_gives_another_schedule_and_levels_differ():
    assert arrival_offsets(Arrival("poisson", 1.0, 0), 8.0, 40) != arrival_offsets(
        Arrival("poisson", 1.0, 1), 8.0, 40
    )
    assert arrival_offsets(Arrival("poisson", 1.0, 0), 8.0, 40, 0) != arrival_offsets(
        Arrival("poisson", 1.0, 0), 8.0, 40, 1
    )


# -- held as the server sees it -----------------------------------------------------------------


def test_a_poisson_rate_of_8_per_s_is_held_within_10_percent_on_the_servers_clock():
    arrivals: list[float] = []
    requests = 48
    with raw_server(_arrivals_server(arrivals)) as port:
        plan = _plan(
            f"http://127.0.0.1:{port}/v1", OpenLoop((8.0,), parse_arrival("poisson"), requests=requests)
        )
        measurement = run_scan(plan)
    report = report_from_measurement(plan, measurement)
    validate(report)
    rate_arrivals = arrivals[-requests:]  # the rate level runs after the plan's levels
    seen = (requests - 1) / (rate_arrivals[-1] - rate_arrivals[0])
    assert 8.0 * 0.9 <= seen <= 8.0 * 1.1, seen
    [level] = report["rate_levels"]
    assert level["rate_per_s"] == 8.0 and level["arrival"] == "poisson"
    assert level["requests"] == level["succeeded"] == requests
    assert 8.0 * 0.9 <= level["achieved_rate_per_s"] <= 8.0 * 1.1
    assert level["waited_for_connection"] == 0 and level["max_connections"] is None
    # the graded levels are the plan's only
    assert [lv["concurrency"] for lv in report["levels"]] == [1]
    assert report["plan"]["open_loop"]["requests_per_level"] == [requests]


def test_latency_from_schedule_includes_the_wait_for_a_connection():
    # One connection, and requests arriving faster than the 40 ms a stream takes: they queue in
    # the client. Measured from the write, each request looks as fast as on an idle server;
    # from its scheduled time it includes the queue.
    slow = TargetConfig(ttft_ms=30, itl_ms=5, tokens=3)
    with serving_target(slow) as (_, host, port):
        plan = _plan(
            f"http://{host}:{port}/v1",
            OpenLoop((60.0,), parse_arrival("constant"), requests=30, max_connections=1),
        )
        measurement = run_scan(plan)
    report = report_from_measurement(plan, measurement)
    validate(report)
    [level] = report["rate_levels"]
    assert level["peak_in_flight"] == 1 and level["max_connections"] == 1
    assert level["waited_for_connection"] > level["requests"] // 2
    assert level["e2e_from_schedule_ms"]["p50"] > level["e2e_latency_ms"]["p50"]
    assert level["ttft_from_schedule_ms"]["p95"] > level["ttft_ms"]["p95"]
    # Structurally, request by request: from the schedule is never less than from the write.
    [result] = measurement.rate_levels
    for record in result.requests:
        assert record.scheduled_at <= record.dispatched_at <= record.sent_at
        assert record.body_written_at is not None and record.scheduled_at < record.body_written_at
    # The server's queue is not the client's: the achieved rate is what one connection gave.
    assert level["achieved_rate_per_s"] < 60.0


def test_a_rate_the_scanner_cannot_hold_is_flagged_client_bound(tmp_path, capsys, monkeypatch):
    # 100,000 requests/s: 2,000 requests due within 20 ms, which no Python client sends.
    monkeypatch.setenv("COLUMNS", "80")
    arrivals: list[float] = []
    with raw_server(_arrivals_server(arrivals)) as port:
        code = main(
            [
                "scan",
                f"http://127.0.0.1:{port}/v1",
                "--model",
                "m",
                "--concurrency",
                "1",
                "--requests",
                "3",
                "--rate",
                "100000",
                "--rate-requests",
                "2000",
                "--arrival",
                "constant",
                "--timeout",
                "20",
                "--out",
                str(tmp_path / "r"),
            ]
        )
    assert code == 0
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    validate(report)
    [level] = report["rate_levels"]
    assert level["rate_held"] is False and level["client_bound"] is True
    assert level["send_lag_ms"]["p95"] > level["send_lag_ms"]["threshold"]
    said = " ".join(
        line.removeprefix("tokvera scan:").strip() for line in capsys.readouterr().out.splitlines()
    )
    assert "rate 100,000.0/s: not held by the scanner" in said
    assert "client-bound" in said


# -- reported, not graded -------------------------------------------------------------------------


def test_rate_levels_do_not_change_the_grade_and_get_attainment_from_the_schedule():
    with serving_target(FAST) as (_, host, port):
        plan = _plan(
            f"http://{host}:{port}/v1",
            OpenLoop((20.0, 40.0), parse_arrival("gamma:0.5"), requests=20),
            slo=parse_slo("ttft_p95_ms=5000"),
        )
        measurement = run_scan(plan)
    assert [lv.rate_per_s for lv in measurement.rate_levels] == [20.0, 40.0]
    with_rates = report_from_measurement(plan, measurement)
    without = report_from_measurement(
        dataclasses.replace(plan, open_loop=None), dataclasses.replace(measurement, rate_levels=[])
    )
    validate(with_rates)
    assert with_rates["checks"] == without["checks"]
    assert with_rates["score"] == without["score"]
    assert with_rates["levels"] == without["levels"]
    assert "rate_levels" not in without and "open_loop" not in without["plan"]
    assert regrade(with_rates)["score"] == with_rates["score"]
    for level in with_rates["rate_levels"]:
        assert level["slo"]["measured_from"] == "schedule"
        assert level["slo"]["met"] and level["slo"]["good"] == level["requests"] == 20
        assert level["arrival"] == "gamma:0.5"
    # A pushed report keeps its rate levels as claimed, marked so.
    proven = prove(with_rates)
    validate(proven)
    assert all(lv["proven_from_samples"] is False for lv in proven["rate_levels"])
    html = render_html(with_rates)
    assert 'id="open-loop"' in html and "from schedule" in html
    assert "rate 20.0/s, from schedule" in html  # its row in the SLO table


def test_the_cli_prints_the_rate_levels_within_80_columns(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    out = tmp_path / "r"
    with serving_target(FAST) as (_, host, port):
        code = main(
            [
                "scan",
                f"http://{host}:{port}/v1",
                "--model",
                "tokvera-target",
                "--concurrency",
                "1",
                "--requests",
                "20",
                "--rate",
                "10,30",
                "--rate-requests",
                "20",
                "--max-connections",
                "4",
                "--slo",
                "ttft_p95_ms=5000",
                "--timeout",
                "10",
                "--out",
                str(out),
            ]
        )
    assert code == 0
    report = json.loads((out / "report.json").read_text())
    validate(report)
    stdout = capsys.readouterr().out
    lines = stdout.splitlines()
    assert [line for line in lines if len(line) > 80 and not line.endswith("report.html")] == []
    said = " ".join(line.removeprefix("tokvera scan:").strip() for line in lines)
    assert (
        "open loop (not graded): poisson arrivals (seed 0), 20/20 requests, at most 4 connections"
    ) in said
    assert "SLO at rate 10.0/s (from schedule): met" in said
    assert "Open-loop rate levels (not graded; times in ms)" in stdout
    # every figure of the rate table is printed, whatever table it landed in
    cells = {cell.strip() for line in lines if line.startswith("│") for cell in line.strip("│").split("│")}
    for row in rate_rows(report["rate_levels"]):
        assert set(row.values()) <= cells


# -- bad input: one line, exit 2, nothing sent ------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--rate", "0"], "positive"),
        (["--rate", "-8"], "positive"),
        (["--rate", "8,fast"], "requests per second"),
        (["--rate", ","], "at least one rate"),
        (["--rate", "8,8"], "twice"),
        (["--rate", "8", "--arrival", "weibull"], "unknown arrival"),
        (["--rate", "8", "--arrival", "gamma"], "gamma:B"),
        (["--rate", "8", "--arrival", "gamma:0"], "burstiness"),
        (["--rate", "8", "--arrival", "gamma:bursty"], "gamma:B"),
        (["--rate", "8", "--arrival", "constant:2"], "only gamma"),
        (["--rate", "8", "--rate-requests", str(MIN_RATE_REQUESTS - 1)], "p95"),
        (["--rate", "8", "--max-connections", "0"], "--max-connections"),
        (["--arrival", "poisson"], "--arrival needs --rate"),
        (["--rate-requests", "40"], "--rate-requests needs --rate"),
        (["--max-connections", "2"], "--max-connections needs --rate"),
    ],
)
def test_bad_rate_input_is_one_line_exit_2_and_nothing_is_sent(extra, says, tmp_path, capsys):
    with serving_target(FAST) as (server, host, port):
        code = main(
            [
                "scan",
                f"http://{host}:{port}/v1",
                "--model",
                "tokvera-target",
                "--out",
                str(tmp_path / "r"),
                *extra,
            ]
        )
        assert not server.received
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and says in err, err
    assert not Path(tmp_path / "r").exists()
