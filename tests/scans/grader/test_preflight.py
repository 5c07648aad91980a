"""`tokvera scan` says what happened: the preflight stops a scan that cannot work
before any load and names the cause in one line; the report carries the cause, the headline
numbers and the charts. Real loopback servers only; each counts the requests it received."""

from __future__ import annotations

import asyncio
import json
import re
import socket
from pathlib import Path

import httpx
import pytest

from scans.grader.demo_server import TargetConfig, running_target
from tests.helpers.servers import json_response, raw_server, read_request
from tests.helpers.servers import validate_report as validate
from tokvera_site.cli import main

KEY = "sk-test-DO-NOT-LEAK-77aa0c"
MODEL_NOT_FOUND = {"error": {"message": "The model `wrong-model` does not exist.",
                             "type": "invalid_request_error", "param": None,
                             "code": "model_not_found"}}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _scan(url: str, out: Path, *extra: str, model: str = "demo") -> list[str]:
    return ["scan", url, "--model", model, "--concurrency", "1,4", "--requests", "8",
            "--timeout", "5", "--out", str(out), *extra]


def _counting_server(chat_answer: bytes, models: object = None):
    """A server that answers GET /v1/models with `models` (404 when None) and every chat
    request with `chat_answer`; counts the chat requests it received."""
    received = {"chat": 0, "models": 0}

    async def handler(reader, writer):
        while True:
            head, _ = await read_request(reader)
            line = head.split(b"\r\n")[0]
            if b"/models" in line:
                received["models"] += 1
                writer.write(json_response(404, {"error": {"message": "no"}}) if models is None
                             else json_response(200, models))
            elif b"/chat/completions" in line:
                received["chat"] += 1
                writer.write(chat_answer)
            else:
                writer.write(json_response(404, {}))
            await writer.drain()

    return handler, received


def _report(out: Path) -> dict:
    report = json.loads((out / "report.json").read_text())
    validate(report)
    return report


def _cause_line(stdout: str) -> str:
    """The line (its wrapped continuations joined) that says why the scan stopped."""
    logical: list[str] = []
    for line in stdout.splitlines():
        if line.startswith("tokvera scan:   ") and logical:
            logical[-1] += " " + line.removeprefix("tokvera scan:").strip()
        else:
            logical.append(line)
    lines = [line for line in logical if "stopped before any load" in line]
    assert len(lines) == 1, stdout
    return lines[0]


def test_nothing_listening_stops_before_load_and_says_connection_refused(tmp_path, capsys):
    port = _free_port()
    assert main(_scan(f"http://127.0.0.1:{port}/v1", tmp_path / "r")) == 5  # down
    line = _cause_line(capsys.readouterr().out)
    assert f"could not connect to 127.0.0.1:{port}: connection refused" in line
    report = _report(tmp_path / "r")
    assert report["preflight"]["stopped"] is True
    assert report["preflight"]["models"]["answered"] is False
    assert [lv["requests"] for lv in report["levels"]] == [1]  # the probe, counted
    assert report["failure_summary"]["stopped_by_preflight"] is True
    assert report["score"]["grade"] == "F"  # no request succeeded: the cap
    assert "connection refused" in (tmp_path / "r" / "report.html").read_text()


def test_a_wrong_model_names_it_and_the_ids_the_server_offers_after_one_request(tmp_path,
                                                                                   capsys):
    answer = json_response(404, MODEL_NOT_FOUND, b"Not Found")
    handler, received = _counting_server(answer, {"object": "list", "data": [
        {"id": "llama-3-8b"}, {"id": "qwen2.5-7b"}]})
    with raw_server(handler) as port:
        assert main(_scan(f"http://127.0.0.1:{port}/v1", tmp_path / "r",
                          model="wrong-model")) == 5  # down
    assert received["chat"] == 1  # the probe, and no load
    line = _cause_line(capsys.readouterr().out)
    assert "model 'wrong-model' not found (HTTP 404" in line
    assert "The model `wrong-model` does not exist." in line
    assert "the server offers: llama-3-8b, qwen2.5-7b" in line
    report = _report(tmp_path / "r")
    assert report["preflight"]["models"]["ids"] == ["llama-3-8b", "qwen2.5-7b"]
    assert report["preflight"]["models"]["model_listed"] is False
    assert report["preflight"]["kind"] == "model_not_found"


def test_a_401_stops_before_load_and_never_repeats_the_key(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("MY_KEY", KEY)
    echo = {"error": {"message": f"Incorrect API key provided: {KEY}.",
                      "type": "invalid_request_error"}}
    handler, received = _counting_server(json_response(401, echo, b"Unauthorized"))
    with raw_server(handler) as port:
        assert main(_scan(f"http://127.0.0.1:{port}/v1", tmp_path / "r",
                          "--api-key-env", "MY_KEY")) == 5  # down
    assert received["chat"] == 1
    captured = capsys.readouterr()
    line = _cause_line(captured.out)
    assert "the server refused the request (HTTP 401" in line
    assert "Incorrect API key provided" in line and "the API key sent was refused" in line
    for text in (captured.out, captured.err, (tmp_path / "r" / "report.json").read_text(),
                 (tmp_path / "r" / "report.html").read_text()):
        assert KEY not in text and "DO-NOT-LEAK" not in text


def test_a_healthy_target_passes_the_preflight_and_runs_every_level(tmp_path, capsys):
    with running_target(TargetConfig(ttft_ms=5, itl_ms=1, tokens=8)) as (host, port):
        assert main(_scan(f"http://{host}:{port}/v1", tmp_path / "r")) == 0
        metrics = httpx.get(f"http://{host}:{port}/metrics").text
    received = re.search(r'tokvera_target_requests_total\{status="200"\} (\d+)', metrics)
    assert int(float(received.group(1))) == 1 + 8 + 8  # the probe, then both levels
    out = capsys.readouterr().out
    assert "stopped before any load" not in out and "what failed" not in out
    assert "Headline numbers" in out and "TTFT p50" in out
    report = _report(tmp_path / "r")
    assert report["preflight"]["stopped"] is False
    assert report["preflight"]["models"]["ids"] == ["tokvera-target"]
    assert report["failure_summary"] is None
    for level in report["levels"]:
        assert level["requests_per_s"] > 0 and level["e2e_latency_ms"]["p50"] > 0
        assert level["output_throughput"]["unit"] == "tokens/s"


def test_a_probe_that_hangs_is_bounded_by_the_timeout_and_the_cause_is_timeout(tmp_path,
                                                                                capsys):
    async def hang(reader, writer):
        await asyncio.sleep(3600)

    with raw_server(hang) as port:
        assert main(_scan(f"http://127.0.0.1:{port}/v1", tmp_path / "r", "--timeout",
                          "0.5")) == 5  # down
    line = _cause_line(capsys.readouterr().out)
    assert "timeout:" in line and "sent no answer within 0.5 s" in line
    assert _report(tmp_path / "r")["preflight"]["probe"]["outcome"] == "timeout"


@pytest.mark.parametrize("models", [
    b"<html>not json</html>",
    json.dumps({"data": [{"id": f"model-{i}"} for i in range(5000)]}).encode(),
    b'{"data": "' + b"x" * (2 * 1024 * 1024) + b'"}',
])
def test_an_odd_models_answer_is_recorded_compactly_and_never_fatal(models, tmp_path):
    from tests.helpers.servers import END_CHUNKS, SSE_HEAD, good_stream, http_chunk

    async def handler(reader, writer):
        while True:
            head, _ = await read_request(reader)
            if b"/models" in head.split(b"\r\n")[0]:
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                             b"content-length: %d\r\n\r\n%s" % (len(models), models))
            else:
                writer.write(SSE_HEAD + http_chunk(good_stream(3)) + END_CHUNKS)
            await writer.drain()

    with raw_server(handler) as port:
        assert main(_scan(f"http://127.0.0.1:{port}/v1", tmp_path / "r")) == 0
    report = _report(tmp_path / "r")
    listing = report["preflight"]["models"]
    assert report["preflight"]["stopped"] is False
    assert len(listing["ids"]) <= 20 and len(json.dumps(listing)) < 2000
    assert [lv["succeeded"] for lv in report["levels"]] == [8, 8]


def test_preflight_only_sends_one_request_and_exits_3_when_the_probe_fails(tmp_path, capsys):
    handler, received = _counting_server(json_response(404, MODEL_NOT_FOUND, b"Not Found"))
    with raw_server(handler) as port:
        code = main(_scan(f"http://127.0.0.1:{port}/v1", tmp_path / "r", "--preflight-only",
                          model="wrong-model"))
    assert code == 3 and received["chat"] == 1
    out = capsys.readouterr().out
    assert "preflight: probe request: model 'wrong-model' not found" in out
    assert not (tmp_path / "r").exists()
    with running_target(TargetConfig(ttft_ms=5, itl_ms=1, tokens=8)) as (host, port):
        assert main(_scan(f"http://{host}:{port}/v1", tmp_path / "r",
                          "--preflight-only")) == 0
    assert "probe request: succeeded" in capsys.readouterr().out


def test_a_level_with_fewer_requests_than_its_concurrency_is_refused(tmp_path, capsys):
    args = ["scan", "http://127.0.0.1:9/v1", "--model", "m", "--concurrency", "1,32",
            "--requests", "16", "--out", str(tmp_path / "r")]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "concurrency 32 needs at least 32 requests" in err
    assert not (tmp_path / "r").exists()


def test_fail_under_exits_4_even_when_publishing_failed(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("SITE_TOKEN", "tkv_test")
    dead_site = f"http://127.0.0.1:{_free_port()}"
    dead_target = f"http://127.0.0.1:{_free_port()}/v1"
    code = main(_scan(dead_target, tmp_path / "r", "--fail-under", "C", "--publish", dead_site,
                      "--token-env", "SITE_TOKEN", "--endpoint",
                      "00000000-0000-4000-8000-000000000000"))
    err = capsys.readouterr().err
    assert code == 4
    assert "not published" in err and "below --fail-under C" in err


def test_version_and_regrade_print_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and re.match(r"tokvera \S+ \(scoring \d+\.\d+\.\d+\)",
                                             capsys.readouterr().out)
    assert main(_scan(f"http://127.0.0.1:{_free_port()}/v1", tmp_path / "r")) == 5  # down
    capsys.readouterr()
    assert main(["regrade", str(tmp_path / "r" / "report.json")]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith("tokvera regrade: F (")
    assert main(["regrade", str(tmp_path / "r" / "report.json"), "--json",
                 str(tmp_path / "again.json")]) == 0
    validate(json.loads((tmp_path / "again.json").read_text()))


def test_a_report_from_before_the_headline_fields_still_regrades_and_renders(tmp_path):
    from scans.grader.report import regrade
    from scans.grader.report_html import render_html

    with running_target(TargetConfig(ttft_ms=5, itl_ms=1, tokens=8)) as (host, port):
        assert main(_scan(f"http://{host}:{port}/v1", tmp_path / "r")) == 0
    old = _report(tmp_path / "r")
    for key in ("preflight", "failure_summary"):
        old.pop(key)
    for level in old["levels"]:
        for key in ("e2e_latency_ms", "requests_per_s", "output_throughput",
                    "failure_summary"):
            level.pop(key)
    again = regrade(old)
    validate(again)
    assert again["score"]["grade"] == old["score"]["grade"]
    html = render_html(again)
    assert 'class="headline"' in html and "chart-throughput" in html
