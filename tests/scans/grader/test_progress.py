"""A running scan's figures (scans.grader.progress) and stopping a scan from another thread
(scans.grader.stopping), against `tokvera target` on loopback."""

from __future__ import annotations

import threading

import pytest

from scans.grader import ScanPlan, run_scan
from scans.grader.demo_server import MODEL_ID, TargetConfig, running_target
from scans.grader.progress import ScanProgress, progress_text
from scans.grader.stopping import ScanStopped


def _plan(port: int, levels=(1, 2), requests=6, timeout_s=30.0) -> ScanPlan:
    return ScanPlan(
        base_url=f"http://127.0.0.1:{port}/v1",
        model=MODEL_ID,
        levels=levels,
        requests=requests,
        max_tokens=8,
        timeout_s=timeout_s,
        use_nvidia_smi=False,
    ).validate()


def test_the_progress_says_which_level_runs_and_how_far_it_got():
    seen: list[dict] = []
    progress = ScanProgress((1, 2))

    def watch(level, completed, total, record=None):
        progress(level, completed, total, record)
        seen.append(progress.snapshot())

    assert progress.snapshot()["phase"] == "preflight"
    with running_target(TargetConfig(ttft_ms=5, itl_ms=1, tokens=8)) as (_, port):
        run_scan(_plan(port), progress=watch, tune_gc=False)

    done = [s["requests_done"] for s in seen]
    assert done == sorted(done) and done[-1] == 12  # 6 at concurrency 1, then 6 at 2
    last = seen[-1]
    assert (last["phase"], last["level_number"], last["levels_planned"]) == ("level", 2, 2)
    assert (last["concurrency"], last["completed"], last["total"]) == (2, 6, 6)
    assert last["ttft_p50_ms"] > 0 and last["output_unit"] == "tokens/s"
    assert last["output_per_s"] > 0 and last["eta_s"] == 0.0
    first_of_second = next(s for s in seen if s["concurrency"] == 2)
    assert first_of_second["completed"] == 0 and first_of_second["ttft_p50_ms"] is None


def test_the_progress_line_reads_as_a_sentence():
    line = progress_text(
        {
            "phase": "level",
            "concurrency": 4,
            "rate_per_s": None,
            "level_number": 2,
            "levels_planned": 3,
            "completed": 12,
            "total": 40,
            "requests_done": 24,
            "ttft_p50_ms": 182.04,
            "output_per_s": 310.25,
            "output_unit": "tokens/s",
            "eta_s": 8.4,
            "elapsed_s": 3.0,
        }
    )
    assert line == (
        "Level 2 of 3, concurrency 4: 12 of 40 requests · TTFT p50 182.0 ms · "
        "310.2 tokens/s · about 8 s left in this level"
    )
    assert progress_text({"phase": "preflight", "elapsed_s": 0.2}).startswith("Checking the endpoint")
    search = progress_text(
        {
            "phase": "search",
            "concurrency": 32,
            "completed": 0,
            "total": 64,
            "ttft_p50_ms": None,
            "output_per_s": None,
            "eta_s": None,
        }
    )
    assert search == "Capacity search, concurrency 32: 0 of 64 requests"
    assert progress_text(None) == ""


def test_a_stop_from_another_thread_ends_a_scan_mid_level():
    stop = threading.Event()
    seen: list[int] = []

    def stop_after_two(level, completed, total, record=None):
        seen.append(completed)
        if completed >= 2:  # mid-level: 198 requests of about 0.2 s each still to go
            threading.Timer(0.05, stop.set).start()  # from another thread, as the site does

    with running_target(TargetConfig(ttft_ms=200, itl_ms=1, tokens=4)) as (_, port):
        with pytest.raises(ScanStopped):
            run_scan(
                _plan(port, levels=(1,), requests=200), progress=stop_after_two, tune_gc=False, stop=stop
            )
    assert max(seen) < 200


def test_a_scan_that_is_never_stopped_runs_to_its_end():
    with running_target(TargetConfig(ttft_ms=5, itl_ms=1, tokens=8)) as (_, port):
        measurement = run_scan(_plan(port, levels=(1,), requests=3), tune_gc=False, stop=threading.Event())
    assert [len(level.requests) for level in measurement.levels] == [3]
