"""`tokvera scan`, `tokvera regrade` and `tokvera target` as a user runs them: exit codes,
files written, and the API key never echoed anywhere."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from scans.grader.demo_server import TargetConfig, running_target
from tests.helpers.servers import END_CHUNKS, SSE_HEAD, good_stream, http_chunk, raw_server, read_request
from tests.helpers.servers import validate_report as validate
from tokvera_site.cli import main

FAST = TargetConfig(ttft_ms=5, itl_ms=1, tokens=8)
KEY = "sk-test-DO-NOT-LEAK-4f1c9a"
TOKVERA = [sys.executable, "-m", "tokvera_site.cli"]


def _scan_args(url: str, out: Path, *extra: str) -> list[str]:
    return ["scan", url, "--model", "demo", "--concurrency", "1,2", "--requests", "3",
            "--timeout", "5", "--out", str(out), "--quiet", *extra]


def test_a_scan_writes_both_files_exits_0_and_never_echoes_the_key(tmp_path):
    seen_auth = []

    async def handler(reader, writer):
        while True:
            head, _ = await read_request(reader)
            auth = [line for line in head.split(b"\r\n") if line.lower().startswith(b"author")]
            seen_auth.extend(auth)
            writer.write(SSE_HEAD + http_chunk(good_stream(3)) + END_CHUNKS)
            await writer.drain()

    out = tmp_path / "report"
    env = {**os.environ, "MY_KEY": KEY}
    with raw_server(handler) as port:
        done = subprocess.run(
            [*TOKVERA, *_scan_args(f"http://127.0.0.1:{port}/v1", out, "--api-key-env",
                                   "MY_KEY")],
            env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert seen_auth and all(line == f"authorization: Bearer {KEY}".encode()
                             for line in seen_auth)
    report_text = (out / "report.json").read_text()
    html = (out / "report.html").read_text()
    for text in (report_text, html, done.stdout, done.stderr):
        assert KEY not in text
        assert "DO-NOT-LEAK" not in text
    validate(json.loads(report_text))
    assert "grade" in done.stdout


def test_an_unknown_flag_exits_2():
    with pytest.raises(SystemExit) as exc:
        main(["scan", "http://127.0.0.1:9/v1", "--model", "m", "--no-such-flag"])
    assert exc.value.code == 2


@pytest.mark.parametrize("url", ["ftp://127.0.0.1/v1", "127.0.0.1:8080/v1", "http:///v1",
                                 "http://user:pw@127.0.0.1/v1", "http://127.0.0.1:99999/v1"])
def test_a_bad_url_exits_2_with_one_line(url, tmp_path, capsys):
    assert main(_scan_args(url, tmp_path / "r")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bad URL" in err


@pytest.mark.parametrize("levels", ["2,4", "1,4,4", "1,x", "0,1"])
def test_bad_concurrency_levels_exit_2(levels, tmp_path):
    args = _scan_args("http://127.0.0.1:9/v1", tmp_path / "r")
    args[args.index("1,2")] = levels
    assert main(args) == 2


def test_a_missing_api_key_variable_exits_2(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("NOT_SET_ANYWHERE", raising=False)
    args = _scan_args("http://127.0.0.1:9/v1", tmp_path / "r", "--api-key-env",
                      "NOT_SET_ANYWHERE")
    assert main(args) == 2
    assert "NOT_SET_ANYWHERE" in capsys.readouterr().err


def test_an_unreadable_prompts_file_exits_2(tmp_path, capsys):
    args = _scan_args("http://127.0.0.1:9/v1", tmp_path / "r", "--prompts",
                      str(tmp_path / "absent.jsonl"))
    assert main(args) == 2
    assert "cannot read prompts file" in capsys.readouterr().err


def test_a_non_utf8_prompts_file_exits_2_with_a_clear_line(tmp_path):
    prompts = tmp_path / "prompts.txt"
    prompts.write_bytes(b"hello\n\xff\xfe broken\n")
    done = subprocess.run(
        [*TOKVERA, *_scan_args("http://127.0.0.1:9/v1", tmp_path / "r", "--prompts",
                               str(prompts))],
        capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "not UTF-8" in done.stderr
    assert not (tmp_path / "r").exists()


def test_the_prompt_sample_feeds_the_repeat_share(tmp_path):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('"a"\n"a"\n"b"\n"c"\n')
    with running_target(FAST) as (host, port):
        assert main(_scan_args(f"http://{host}:{port}/v1", tmp_path / "r", "--prompts",
                               str(prompts))) == 0
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    check = next(c for c in report["checks"] if c["id"] == "repeat_prompt_share")
    assert check["value"] == 0.25 and check["status"] == "warn"
    assert "actually reached the model" in report["measurements"]["repeat_prompt_note"]


def test_fail_under_exits_4_below_the_floor_and_0_at_or_above(tmp_path):
    with running_target(TargetConfig(ttft_ms=5, itl_ms=1, tokens=8, error_rate=1.0)) as (h, p):
        assert main(_scan_args(f"http://{h}:{p}/v1", tmp_path / "bad", "--fail-under",
                               "D")) == 4
    with running_target(FAST) as (h, p):
        assert main(_scan_args(f"http://{h}:{p}/v1", tmp_path / "good", "--fail-under",
                               "F")) == 0
        assert main(_scan_args(f"http://{h}:{p}/v1", tmp_path / "plain")) == 0


def test_an_unreachable_target_completes_and_the_report_says_why(tmp_path, capsys):
    with raw_server(lambda r, w: None) as port:
        pass  # nothing listens there any more
    assert main(_scan_args(f"http://127.0.0.1:{port}/v1", tmp_path / "r")) == 5  # down
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    validate(report)
    # The preflight's probe failed to connect: no load level ran, the probe is counted.
    [level] = report["levels"]
    assert level["failed"] == {"transport_error": 1}
    assert "ConnectError" in level["failure_examples"]["transport_error"]
    assert {"id": "no_successful_request", "grade_at_best": "F"} in \
        report["score"]["caps_applied"]


def test_regrade_round_trips_a_report(tmp_path, capsys):
    with running_target(FAST) as (h, p):
        assert main(_scan_args(f"http://{h}:{p}/v1", tmp_path / "r")) == 0
    original = json.loads((tmp_path / "r" / "report.json").read_text())
    assert main(["regrade", str(tmp_path / "r" / "report.json"), "--out",
                 str(tmp_path / "again")]) == 0
    again = json.loads((tmp_path / "again" / "report.json").read_text())
    validate(again)
    assert again["score"] == original["score"] and again["checks"] == original["checks"]
    assert (tmp_path / "again" / "report.html").exists()
    capsys.readouterr()
    assert main(["regrade", str(tmp_path / "r" / "report.json"), "--json", "-"]) == 0
    assert json.loads(capsys.readouterr().out)["score"] == original["score"]


def test_regrade_of_something_that_is_not_a_report_exits_2(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text("{not json")
    assert main(["regrade", str(bad)]) == 2
    bad.write_text('{"checks": 3}')
    assert main(["regrade", str(bad)]) == 2


def test_tokvera_target_and_tokvera_scan_work_as_separate_processes(tmp_path):
    target = subprocess.Popen(
        [*TOKVERA, "target", "--port", "0", "--ttft-ms", "5", "--itl-ms", "1", "--tokens", "8"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = target.stdout.readline()
        match = re.search(r"http://127\.0\.0\.1:(\d+)/v1", line)
        assert match, line
        done = subprocess.run(
            [*TOKVERA, *_scan_args(match.group(0), tmp_path / "r")],
            capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
    finally:
        target.terminate()
        target.wait(10)
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    validate(report)
    assert all(level["failed"] == {} for level in report["levels"])
    assert report["measurements"]["metrics_endpoint"]["present"] is True
