"""What `tokvera scan` prints: laid out for the terminal's width, the caps and
failed checks named after the grade, a model the server does not list warned about before it,
a down endpoint led by its cause with no letter, and TLS failures named as such. Real loopback
servers: the reference target in-process, raw asyncio servers."""

from __future__ import annotations

import json
import re

import pytest

from scans.grader import ScanPlan, run_scan
from scans.grader.cli import summary
from scans.grader.demo_server import TargetConfig, running_target
from scans.grader.headline import COLUMNS, headline_rows
from tests.helpers.servers import END_CHUNKS, SSE_HEAD, good_stream, http_chunk, raw_server, read_request
from tests.helpers.servers import validate_report as validate
from tokvera_site.cli import main

FAST = TargetConfig(ttft_ms=5, itl_ms=1, tokens=8)
# One stream at a time: at 4 in flight a request waits for three others (each ~0.75 s), so
# TTFT p99 under load is many times the one-request figure and, past the time-to-first-token
# bounds, ttft_p99_load_ratio fails (cap C).
QUEUEING = TargetConfig(ttft_ms=150, itl_ms=120, tokens=6, max_concurrency=1)
SERVED_MODEL = "tokvera-target"  # what the reference target lists in /models


def _scan(url: str, *, model: str = SERVED_MODEL, levels: str = "1,4",
          requests: str = "8") -> list[str]:
    return ["scan", url, "--model", model, "--concurrency", levels, "--requests", requests,
            "--timeout", "5", "--out", "r"]


def _run(capsys, monkeypatch, tmp_path, columns: int, args: list[str]) -> tuple[int, str, dict]:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", str(columns))
    code = main(args)
    out = capsys.readouterr().out
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    validate(report)
    return code, out, report


def _logical(out: str) -> list[str]:
    """The CLI's lines with their wrapped continuations joined."""
    lines: list[str] = []
    for line in out.splitlines():
        if line.startswith("tokvera scan:   ") and lines:
            lines[-1] += " " + line.removeprefix("tokvera scan:").strip()
        else:
            lines.append(line)
    return lines


def _printed_figures(out: str) -> dict[tuple[str, str], str]:
    """(concurrency, column title) → the text printed, across however many tables."""
    figures: dict[tuple[str, str], str] = {}
    headers: list[str] = []
    for line in out.splitlines():
        if line.startswith("┃"):
            headers = [cell.strip() for cell in line.strip("┃").split("┃")]
        elif line.startswith("│"):
            cells = [cell.strip() for cell in line.strip("│").split("│")]
            for title, cell in zip(headers, cells, strict=True):
                figures[(cells[0], title)] = cell
    return figures


def _assert_fits_and_matches(out: str, report: dict, width: int) -> None:
    for line in out.splitlines():
        assert len(line) <= width, f"{len(line)} > {width}: {line!r}"
        assert "…" not in line, line  # nothing cut
    printed = _printed_figures(out)
    for row in headline_rows(report["levels"]):
        for key, title, _unit in COLUMNS:
            assert printed[(row["concurrency"], title)] == row[key], (row["concurrency"], title)


@pytest.mark.parametrize("columns", [80, 120, 200])
def test_the_table_fits_the_width_and_shows_the_reports_figures(columns, capsys, monkeypatch,
                                                                tmp_path):
    with running_target(FAST) as (h, p):
        code, out, report = _run(capsys, monkeypatch, tmp_path, columns,
                                 _scan(f"http://{h}:{p}/v1"))
    assert code == 0
    _assert_fits_and_matches(out, report, columns)
    headers = [line for line in out.splitlines() if line.startswith("┃")]
    if columns >= 200:
        assert len(headers) == 1  # the full table, one row of headers
    else:
        assert len(headers) > 1  # several narrower tables, the concurrency column repeated
        assert all(line.startswith("┃ Concurrency ┃") for line in headers)
    # Every title whole, on one line.
    titles = {cell.strip() for line in headers for cell in line.strip("┃").split("┃")}
    assert titles == {title for _, title, _ in COLUMNS}
    assert _logical(out)[-1].startswith("tokvera scan: grade A (")  # the verdict is last
    assert "warning" not in out and "capped" not in out


def test_with_no_columns_set_and_no_terminal_the_width_is_80(capsys, monkeypatch, tmp_path):
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.chdir(tmp_path)
    with running_target(FAST) as (h, p):
        assert main(_scan(f"http://{h}:{p}/v1")) == 0
    out = capsys.readouterr().out  # captured: not a terminal
    assert max(len(line) for line in out.splitlines()) <= 80


def test_a_narrow_terminal_gets_one_block_per_level(capsys, monkeypatch, tmp_path):
    with running_target(FAST) as (h, p):
        _, out, report = _run(capsys, monkeypatch, tmp_path, 24, _scan(f"http://{h}:{p}/v1"))
    lines = out.splitlines()
    assert "concurrency 1" in lines and "concurrency 4" in lines
    rows = headline_rows(report["levels"])
    assert f"  TTFT p99: {rows[1]['ttft_p99']} ms" in lines


def test_wrapping_never_separates_a_number_from_its_unit():
    text = "server counted (p50) at 1: 46 → 8, 0.0 % cached; 4: 43 → 8, 12.5 % cached"
    for width in range(summary.MIN_WIDTH, 90):
        lines = summary.wrap(text, width)
        assert all(len(line) <= width for line in lines)
        assert not any(line.removeprefix("tokvera scan:").strip().startswith("%")
                       for line in lines)
        joined = " ".join(line.removeprefix("tokvera scan: ").strip() for line in lines)
        assert joined == text


def test_a_cap_is_named_after_the_grade_with_its_numbers(capsys, monkeypatch, tmp_path):
    with running_target(QUEUEING) as (h, p):
        code, out, report = _run(capsys, monkeypatch, tmp_path, 80,
                                 _scan(f"http://{h}:{p}/v1", levels="1,4", requests="8"))
    assert code == 0
    score = report["score"]
    assert {"id": "ttft_collapses_under_load", "grade_at_best": "C"} in score["caps_applied"]
    assert score["grade"] == "C" and score["uncapped_grade"] in ("A", "B")
    _assert_fits_and_matches(out, report, 80)
    text = " ".join(_logical(out))
    [check] = [c for c in report["checks"] if c["id"] == "ttft_p99_load_ratio"]
    peak, alone = report["levels"][-1]["ttft_ms"]["p99"], report["levels"][0]["ttft_ms"]["p99"]
    ratio = f"{check['value']:.2f}×"
    assert (f"capped at C: TTFT p99 at concurrency 4 is {ratio} one request's "
            f"({peak:,.1f} ms against {alone:,.1f} ms; limit 4×)") in text
    # the details first, the verdict last
    assert text.index("capped at C") < text.index("grade C (")


def test_a_model_the_server_does_not_list_is_warned_about_before_the_grade(capsys, monkeypatch,
                                                                           tmp_path):
    with running_target(FAST) as (h, p):
        code, out, report = _run(capsys, monkeypatch, tmp_path, 120,
                                 _scan(f"http://{h}:{p}/v1", model="gpt-does-not-exist"))
    assert code == 0  # the server answered: a grade, but a doubtful one
    lines = _logical(out)
    assert lines[0] == ("tokvera scan: warning: the server does not list model "
                        "'gpt-does-not-exist' (it lists: tokvera-target); the grade is of "
                        "whatever answered")
    assert lines[-1].startswith("tokvera scan: grade ")  # the verdict stays last
    assert report["preflight"]["models"]["model_listed"] is False
    assert report["preflight"]["warnings"] == [{
        "kind": "model_not_listed", "model": "gpt-does-not-exist",
        "message": lines[0].removeprefix("tokvera scan: warning: ")}]
    _assert_fits_and_matches(out, report, 120)


def test_a_listed_model_has_no_warning(capsys, monkeypatch, tmp_path):
    with running_target(FAST) as (h, p):
        _, out, report = _run(capsys, monkeypatch, tmp_path, 120, _scan(f"http://{h}:{p}/v1"))
    assert report["preflight"]["warnings"] == []
    assert "warning" not in out


def test_a_down_endpoint_leads_with_the_cause_and_prints_no_letter(capsys, monkeypatch,
                                                                   tmp_path):
    with raw_server(lambda r, w: None) as port:
        pass  # nothing listens there any more
    code, out, report = _run(capsys, monkeypatch, tmp_path, 80,
                             _scan(f"http://127.0.0.1:{port}/v1"))
    assert code == 5  # the scan completed and wrote its report; no request succeeded
    assert report["score"]["grade"] == "F"  # report.json keeps what the scoring spec gives
    lines = _logical(out)
    assert lines[-2] == (f"tokvera scan: down: could not connect to 127.0.0.1:{port}: "
                         "connection refused (nothing is listening there); stopped before any "
                         "load")
    assert lines[-1].startswith("tokvera scan: no quality grade: the endpoint did not answer")
    assert not re.search(r"\bgrade [A-F]\b", out)
    assert not any(line.startswith(("tokvera scan: F at", "┃")) for line in lines)
    assert all(len(line) <= 80 for line in out.splitlines())


def test_a_down_endpoint_below_the_floor_exits_4_and_says_down(capsys, monkeypatch, tmp_path):
    with raw_server(lambda r, w: None) as port:
        pass
    monkeypatch.chdir(tmp_path)
    assert main([*_scan(f"http://127.0.0.1:{port}/v1"), "--fail-under", "D"]) == 4
    err = capsys.readouterr().err
    assert "the endpoint is down (report.json: F) is below --fail-under D" in err


def test_every_request_failing_is_down_too(capsys, monkeypatch, tmp_path):
    with running_target(TargetConfig(ttft_ms=5, itl_ms=1, tokens=8, error_rate=1.0)) as (h, p):
        _, out, report = _run(capsys, monkeypatch, tmp_path, 80, _scan(f"http://{h}:{p}/v1"))
    assert not report["preflight"]["stopped"]
    first = _logical(out)[-2]
    assert first.startswith("tokvera scan: down: no request succeeded:")
    assert "HTTP 500" in first
    assert not re.search(r"\bgrade [A-F]\b", out)


async def _plain_http(reader, writer):
    """A plain-HTTP server: whatever arrives (a TLS ClientHello here) gets an HTTP 400."""
    await reader.read(1)
    writer.write(b"HTTP/1.1 400 Bad Request\r\ncontent-type: text/plain\r\ncontent-length: 11"
                 b"\r\nconnection: close\r\n\r\nbad request")
    await writer.drain()


def test_a_plain_http_server_on_an_https_url_is_named(capsys, monkeypatch, tmp_path):
    with raw_server(_plain_http) as port:
        plan = ScanPlan(base_url=f"https://127.0.0.1:{port}/v1", model="m", levels=(1,),
                        requests=2, max_tokens=8, timeout_s=5)
        m = run_scan(plan)
        assert m.preflight.stopped and m.preflight.kind == "tls"
        assert m.preflight.cause == (
            f"TLS handshake failed: the server at https://127.0.0.1:{port} answered plain "
            f"HTTP — did you mean http://127.0.0.1:{port}?")
        code, out, report = _run(capsys, monkeypatch, tmp_path, 120,
                                 _scan(f"https://127.0.0.1:{port}/v1", model="m"))
    assert code == 5
    assert _logical(out)[-2] == f"tokvera scan: down: {m.preflight.cause}; stopped before any load"
    assert report["preflight"]["kind"] == "tls"
    assert "plain HTTP" in report["failure_summary"]["sentence"]


def test_preflight_only_names_a_plain_http_server_and_exits_3(capsys):
    with raw_server(_plain_http) as port:
        code = main(["scan", f"https://127.0.0.1:{port}/v1", "--model", "m", "--timeout", "5",
                     "--preflight-only"])
    assert code == 3
    out = capsys.readouterr().out
    assert "TLS handshake failed: the server at https://127.0.0.1" in out
    assert "did you mean http://127.0.0.1" in out


def test_an_http_server_that_answers_is_not_a_tls_failure(capsys, monkeypatch, tmp_path):
    async def handler(reader, writer):
        while True:
            await read_request(reader)
            writer.write(SSE_HEAD + http_chunk(good_stream(3)) + END_CHUNKS)
            await writer.drain()

    with raw_server(handler) as port:
        _, out, report = _run(capsys, monkeypatch, tmp_path, 120,
                              _scan(f"http://127.0.0.1:{port}/v1", model="m", levels="1",
                                    requests="2"))
    assert report["preflight"]["kind"] is None and "TLS" not in out
