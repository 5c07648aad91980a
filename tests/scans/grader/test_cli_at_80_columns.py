"""The `tokvera` CLI as a user reads it in an 80-column terminal: the verdict (headline, then
grade) is what stays on screen after the tables, `--quiet` prints only that verdict, a scan
where no request succeeded exits with its own documented code, `regrade --against` fails when
the reports are not comparable, Ctrl-C stops `tokvera target` without a traceback, no line
shows Python's None or breaks inside a word. Each runs the real `tokvera` as a subprocess
against `tokvera target` (another subprocess) or a raw asyncio server on loopback."""

from __future__ import annotations

import html as html_text
import json
import re
import signal
import subprocess
import threading
from pathlib import Path

import httpx

from scans.grader.demo_server import TargetConfig, running_target
from scans.grader.report_html import render_html
from tests.helpers.cli import (
    FAST,
    MODEL,
    assert_readable_at_80,
    target_process,
    tokvera,
)
from tests.helpers.servers import raw_server


def scan(url: str, out: str, cwd: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return tokvera("scan", url, "--model", MODEL, "--concurrency", "1,4", "--requests", "8",
                   "--timeout", "5", "--out", out, *extra, cwd=cwd)


def test_the_grade_and_headline_are_the_last_lines_after_the_tables(tmp_path):
    with target_process(*FAST) as (_, url):
        done = scan(url, "r", tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    lines = done.stdout.splitlines()
    assert_readable_at_80(done.stdout)
    last_table_row = max(i for i, line in enumerate(lines) if line.startswith(("│", "└")))
    verdict = [line for line in lines[last_table_row + 1:]]
    grade = report["score"]["grade"]
    # the headline (what was sent, at which grade), then the grade line: nothing after them
    assert verdict[0].startswith(f"tokvera scan: {grade} at 1/4 × 8")
    assert [line for line in verdict if line.startswith("tokvera scan: grade ")] != []
    grade_at = next(i for i, line in enumerate(verdict) if line.startswith("tokvera scan: grade"))
    assert all(line.startswith("tokvera scan:   ") for line in verdict[grade_at + 1:])
    assert verdict[grade_at].startswith(f"tokvera scan: grade {grade} (")
    # the details come before the tables
    report_line = next(i for i, line in enumerate(lines) if line.startswith("tokvera scan: report:"))
    assert report_line < last_table_row


def test_quiet_prints_only_the_headline_and_the_grade(tmp_path):
    with target_process(*FAST) as (_, url):
        done = scan(url, "r", tmp_path, "--quiet")
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    logical = [line for line in done.stdout.splitlines()
               if not line.startswith("tokvera scan:   ")]
    grade = report["score"]["grade"]
    assert len(logical) == 2, done.stdout
    assert logical[0].startswith(f"tokvera scan: {grade} at 1/4 × 8")
    assert logical[1].startswith(f"tokvera scan: grade {grade} (")
    assert done.stderr == ""
    assert_readable_at_80(done.stdout)


def test_the_capacity_answer_is_one_headline_line(tmp_path):
    with target_process("--ttft-ms", "40", "--itl-ms", "20", "--tokens", "4",
                        "--slots", "2") as (_, url):
        done = scan(url, "r", tmp_path, "--slo", "ttft_p95_ms=80", "--find-capacity",
                    "--search-levels", "3", "--quiet")
    assert done.returncode == 0, done.stderr
    found = json.loads((tmp_path / "r" / "report.json").read_text())["capacity"]
    lines = done.stdout.splitlines()
    assert lines[0] == (f"tokvera scan: capacity: {found['concurrency']} concurrent requests "
                        "within the SLO")
    assert lines[1].startswith("tokvera scan: grade ")
    assert_readable_at_80(done.stdout)


def test_a_scan_where_no_request_succeeded_exits_5_without_fail_under(tmp_path):
    with raw_server(lambda r, w: None) as port:
        pass  # nothing listens there any more
    done = scan(f"http://127.0.0.1:{port}/v1", "r", tmp_path)
    assert done.returncode == 5, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    logical = [line for line in lines if not line.startswith("tokvera scan:   ")]
    assert logical[-2].startswith("tokvera scan: down: could not connect to 127.0.0.1")
    assert logical[-1].startswith("tokvera scan: no quality grade: the endpoint did not answer")
    assert done.stderr == ""  # nothing after the verdict, not even an empty progress line
    assert_readable_at_80(done.stdout + done.stderr)
    # the code is documented where a user looks for it
    helped = tokvera("scan", "--help", cwd=tmp_path).stdout
    assert "5 no request succeeded" in " ".join(helped.split())


def test_every_request_failing_exits_5_too(tmp_path):
    with target_process(*FAST, "--error-rate", "1") as (_, url):
        done = scan(url, "r", tmp_path)
    assert done.returncode == 5
    assert done.stdout.splitlines()[-1].startswith("tokvera scan:   ") or \
        "no quality grade" in done.stdout.splitlines()[-1]
    assert_readable_at_80(done.stdout + done.stderr)


def test_regrade_against_a_report_that_is_not_comparable_exits_6(tmp_path):
    with target_process(*FAST) as (_, url):
        assert scan(url, "a", tmp_path).returncode == 0
        # replies of 4 tokens asked for: another workload, not comparable
        other = tokvera("scan", url, "--model", MODEL, "--concurrency", "1", "--requests", "4",
                        "--output-tokens", "4", "--timeout", "5", "--out", "b", cwd=tmp_path)
        assert other.returncode == 0, other.stderr
    same = tokvera("regrade", "a/report.json", "--against", "a/report.json", cwd=tmp_path)
    assert same.returncode == 0, same.stdout + same.stderr
    assert "comparable with a/report.json" in same.stdout
    differs = tokvera("regrade", "a/report.json", "--against", "b/report.json", cwd=tmp_path)
    assert differs.returncode == 6, differs.stdout + differs.stderr
    assert "not comparable with b/report.json" in differs.stdout
    assert_readable_at_80(same.stdout + differs.stdout)
    helped = tokvera("regrade", "--help", cwd=tmp_path).stdout
    assert "6 --against a report that is not comparable" in " ".join(helped.split())


def test_regrade_of_a_report_without_points_never_says_none(tmp_path):
    with raw_server(lambda r, w: None) as port:
        pass
    scan(f"http://127.0.0.1:{port}/v1", "r", tmp_path)
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    del report["score"]["scoring_version"]  # a report from before the field existed
    (tmp_path / "old.json").write_text(json.dumps(report))
    done = tokvera("regrade", "old.json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert_readable_at_80(done.stdout)


def test_ctrl_c_stops_tokvera_target_without_a_traceback_while_streams_run(tmp_path):
    with target_process("--ttft-ms", "5", "--itl-ms", "200") as (process, url):
        started = threading.Barrier(4)

        def stream() -> None:
            try:
                with httpx.stream("POST", f"{url}/chat/completions", timeout=30, json={
                        "model": MODEL, "stream": True,
                        "messages": [{"role": "user", "content": "hi"}]}) as response:
                    lines = response.iter_lines()
                    next(lines)  # the stream is running
                    started.wait(10)
                    for _ in lines:
                        pass
            except (httpx.HTTPError, threading.BrokenBarrierError):
                pass

        threads = [threading.Thread(target=stream, daemon=True) for _ in range(3)]
        for thread in threads:
            thread.start()
        started.wait(10)
        process.send_signal(signal.SIGINT)  # what Ctrl-C sends
        _, err = process.communicate(timeout=20)
    assert "Traceback" not in err, err
    assert "CancelledError" not in err
    assert err.strip() == "tokvera target: stopped"
    assert process.returncode == 0


def test_a_down_scans_report_html_says_down_no_grade_with_the_cause(tmp_path):
    with running_target(TargetConfig(ttft_ms=5, itl_ms=1, tokens=8, error_rate=1.0)) as (h, p):
        scan(f"http://{h}:{p}/v1", "r", tmp_path)
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    assert report["score"]["grade"] == "F"  # report.json keeps the scoring spec's F
    for html in ((tmp_path / "r" / "report.html").read_text(),
                 render_html(report, surface="site")):
        summary = html[html.index('<section class="summary">'):]
        summary = summary[:summary.index("</section>")]
        text = re.sub(r"\s+", " ", html_text.unescape(re.sub(r"<[^>]+>", " ", summary)))
        assert "down · no grade" in text
        assert "Down: no request succeeded" in text and "HTTP 500" in text
        assert 'class="grade g-F"' not in summary
        assert "Points:" not in text and "12.5" not in text


# -- the progress bars' time left ------------------------------------------------------------------

class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _record():
    from types import SimpleNamespace

    return SimpleNamespace(succeeded=True, ttft_ms=100.0, output_chunks=4, completion_tokens=4)


def test_the_bars_time_left_is_the_whole_plans_from_the_measured_pace():
    """Levels 1 and 4, 40 requests each, one request every 0.5 s at concurrency 1: half-way
    through the first level, 10 s are left in it and the next level's 40 requests on 4
    streams take 10 rounds of 0.5 s more: 15 s in all (a level's own bar would say 10 s)."""
    import io

    from rich.console import Console

    from scans.grader import ScanPlan
    from scans.grader.cli.scan import ScanBars
    from scans.grader.objective import parse_slo

    buffer = io.StringIO()
    clock = Clock()
    plan = ScanPlan(base_url="http://127.0.0.1:9/v1", model=MODEL, levels=(1, 4), requests=40)
    bars = ScanBars(plan, Console(file=buffer, width=80, force_terminal=False), clock=clock)
    with bars:
        bars(1, 0, 40)
        for done in range(1, 21):
            clock.now += 0.5
            bars(1, done, 40, _record())
        assert bars.left_text() == "~15 s left"
        searching = ScanBars(ScanPlan(base_url="http://127.0.0.1:9/v1", model=MODEL,
                                      levels=(1, 4), requests=40, find_capacity=True,
                                      slo=parse_slo("ttft_p95_ms=80", 0.95)), clock=clock)
        searching(1, 0, 40)
        clock.now += 0.5
        searching(1, 1, 40, _record())
        assert searching.left_text().endswith(" left + search")
    shown = buffer.getvalue()
    assert "~15 s left" in shown
    assert all(len(line) <= 80 for line in shown.splitlines())
    assert "…" not in shown


def test_the_progress_rows_fit_80_columns_without_cutting_a_figure(tmp_path):
    with target_process(*FAST) as (_, url):
        done = scan(url, "r", tmp_path, "--requests", "40")
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stderr.splitlines() if line.startswith("c=")]
    assert [row.split()[0] for row in rows] == ["c=1", "c=4"]
    assert all(len(row) <= 80 and "…" not in row for row in rows), rows
    assert all("40/40" in row and "TTFT" in row for row in rows)


def test_the_demo_targets_shape_is_one_flag_and_is_not_mixed_with_another(tmp_path):
    refused = tokvera("target", "--port", "0", "--demo", "--tokens", "3", cwd=tmp_path)
    assert refused.returncode == 2
    assert refused.stderr.strip() == (
        "tokvera target: --demo sets the demo target's shape; drop --tokens or --demo")
    with target_process("--demo") as (_, url):
        models = httpx.get(f"{url}/models", timeout=5).json()
    assert [m["id"] for m in models["data"]] == ["tokvera-target"]
