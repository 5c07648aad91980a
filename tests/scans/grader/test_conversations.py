"""Conversations (`--turns N`): each session resends its growing history, the server's prefix
cache shows in a cached share that grows turn by turn, every turn has its own TTFT figures, and
requests.jsonl names each request's session and turn. Against `tokvera target` on loopback
(in-process, and as the real CLI) and a raw server that counts the requests it got."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from scans.grader import ScanPlan, run_scan
from scans.grader.demo_server import TargetConfig, serving_target
from scans.grader.report import agent_figures
from scans.grader.workload import Workload
from tests.helpers.servers import good_stream, raw_server, stream_server, validate_report

TOKVERA = [sys.executable, "-m", "tokvera_site.cli"]
FAST = TargetConfig(ttft_ms=2.0, itl_ms=0.5, tokens=12)


def _plan(port: int, **workload) -> ScanPlan:
    return ScanPlan(base_url=f"http://127.0.0.1:{port}/v1", model="tokvera-target", levels=(1, 3),
                    requests=9, timeout_s=10.0, max_tokens=16, workload=Workload(**workload))


def test_each_turn_resends_the_history_it_received_and_the_cached_share_grows() -> None:
    with serving_target(FAST) as (server, _, port):
        measurement = run_scan(_plan(port, turns=3))
        bodies = list(server.received)
    level = measurement.levels[-1]
    assert len(level.requests) == 9 and all(r.succeeded for r in level.requests)
    turns = agent_figures(level)["turns"]
    assert [t["turn"] for t in turns] == [1, 2, 3]
    assert all(t["requests"] == 3 and t["ttft_ms"]["p50"] is not None for t in turns)
    shares = [t["cached_share"] for t in turns]
    assert shares[0] == 0 and 0 < shares[1] < shares[2]  # fresh sessions, then their history
    third_turns = [b["messages"] for b in bodies if len(b["messages"]) == 5]
    assert third_turns, "no request resent two earlier turns"
    messages = third_turns[0]
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant", "user"]
    # what the target streamed, resent as the assistant's words
    assert messages[1]["content"].startswith(" the model streams")
    first_turns = [b["messages"][0]["content"] for b in bodies if len(b["messages"]) == 1]
    assert len(set(first_turns)) == len(first_turns)  # the nonce keeps sessions apart


def test_a_level_counts_sessions_in_flight_and_rounds_requests_to_whole_sessions() -> None:
    with serving_target(FAST) as (_, _, port):
        level = run_scan(_plan(port, turns=4)).levels[-1]
    assert len(level.requests) == 12  # 9 requests → 3 sessions of 4
    assert sorted({r.session for r in level.requests}) == [0, 1, 2]
    for session in range(3):
        mine = sorted((r for r in level.requests if r.session == session),
                      key=lambda r: r.turn or 0)
        # a session's turns run one after another: each starts after the previous ended
        for earlier, later in zip(mine, mine[1:], strict=False):
            assert earlier.ended_at is not None and later.scheduled_at >= earlier.ended_at


def test_the_cli_writes_turns_in_report_json_and_requests_jsonl(tmp_path: Path) -> None:
    with serving_target(FAST) as (_, host, port):
        run = subprocess.run([*TOKVERA, "scan", f"http://{host}:{port}/v1", "--model", "m",
                              "--concurrency", "1,2", "--requests", "4", "--turns", "2",
                              "--think-time-ms", "5", "--out", str(tmp_path), "--quiet"],
                             capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    validate_report(report)
    assert report["plan"]["workload"]["agent"]["turns"] == 2
    assert [t["turn"] for t in report["levels"][1]["turns"]] == [1, 2]
    lines = [json.loads(x) for x in (tmp_path / "requests.jsonl").read_text().splitlines()]
    level_lines = [x for x in lines if x["phase"] == "level"]
    assert {(x["session"], x["turn"]) for x in level_lines if x["concurrency"] == 2} == {
        (0, 1), (0, 2), (1, 1), (1, 2)}
    assert all("turn" not in x for x in lines if x["phase"] == "probe")


@pytest.mark.parametrize("flags", [["--turns", "0"], ["--turns", "-3"],
                                   ["--think-time-ms", "20"],
                                   ["--workload", "agent", "--turns", "1"],
                                   ["--turns", "2", "--rate", "1"]])
def test_bad_conversation_options_exit_2_before_any_request(tmp_path: Path,
                                                              flags: list[str]) -> None:
    seen: list[int] = []

    def body(number: int) -> bytes:
        seen.append(number)
        return good_stream()

    with raw_server(stream_server(body)) as port:
        run = subprocess.run([*TOKVERA, "scan", f"http://127.0.0.1:{port}/v1", "--model", "m",
                              "--out", str(tmp_path / "out"), *flags],
                             capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    assert len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert seen == []
