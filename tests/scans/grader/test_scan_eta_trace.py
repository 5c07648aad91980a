"""The whole scan's time left counts a trace replay (`--trace`): its span over the speed and
its last request's own time, before the replay and while it runs on the trace's clock. A clock
the test moves, then a real scan of `tokvera target` on loopback with the CLI's bars."""

from __future__ import annotations

import io
import json
from pathlib import Path
from types import SimpleNamespace

from rich.console import Console

from scans.grader import ScanPlan, run_scan
from scans.grader.cli.scan import ScanBars
from scans.grader.demo_server import MODEL_ID, TargetConfig, running_target
from scans.grader.progress import ScanProgress, progress_text
from scans.grader.trace_file import TraceReplay, load_trace


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _record() -> SimpleNamespace:
    return SimpleNamespace(succeeded=True, ttft_ms=100.0, output_chunks=4, completion_tokens=4)


def _trace(tmp_path: Path, last_ms: int, requests: int = 4, speed: float = 1.0) -> TraceReplay:
    """A Mooncake trace whose requests are due evenly up to `last_ms`."""
    path = tmp_path / f"trace-{last_ms}.jsonl"
    step = last_ms // max(1, requests - 1)
    path.write_text("".join(json.dumps({"timestamp": i * step, "input_length": 40,
                                        "output_length": 4, "hash_ids": []}) + "\n"
                            for i in range(requests)))
    return TraceReplay(load_trace(path), speed=speed).validate()


def _plan(trace: TraceReplay | None) -> ScanPlan:
    return ScanPlan(base_url="http://127.0.0.1:9/v1", model=MODEL_ID, levels=(1,), requests=8,
                    trace=trace)


def _half_way(trace: TraceReplay | None) -> dict:
    """Level 1 of (1,), 8 requests: 4 done after 2 s, one request time of 0.5 s."""
    clock = Clock()
    progress = ScanProgress(clock=clock)
    progress.expect(_plan(trace))
    progress(1, 0, 8)
    for done in range(1, 5):
        clock.now += 0.5
        progress(1, done, 8, _record())
    return progress.snapshot()


def test_the_time_left_grows_with_the_traces_span(tmp_path):
    without = _half_way(None)["scan_eta_s"]
    short = _half_way(_trace(tmp_path, 3_000))["scan_eta_s"]
    long = _half_way(_trace(tmp_path, 9_000))["scan_eta_s"]
    assert without == 2.0  # this level's 4 requests left at 0.5 s
    # then the replay: its span, then its last request's time (0.5 s)
    assert short == without + 3.0 + 0.5
    assert long == without + 9.0 + 0.5
    faster = _half_way(_trace(tmp_path, 9_000, speed=3.0))["scan_eta_s"]
    assert faster == without + 3.0 + 0.5  # the span over the speed


def test_while_the_trace_runs_its_time_left_follows_the_traces_clock(tmp_path):
    clock = Clock()
    progress = ScanProgress(clock=clock)
    progress.expect(_plan(_trace(tmp_path, 6_000)))
    progress(1, 0, 8)
    for done in range(1, 9):
        clock.now += 0.5
        progress(1, done, 8, _record())
    progress.trace(0, 4)
    start = progress.snapshot()
    assert start["phase"] == "trace" and start["scan_eta_s"] == 6.5
    clock.now += 2.0
    progress.trace(1, 4, _record())
    later = progress.snapshot()
    assert later["scan_eta_s"] == later["eta_s"] == 4.5
    assert progress_text(later).startswith("Trace replay: 1 of 4 requests")
    assert progress_text(later).endswith("about 4 s left in this level")
    progress.trace(4, 4, _record())
    assert progress.snapshot()["scan_eta_s"] == 0.0


def test_the_clis_bars_say_the_trace_is_still_to_come(tmp_path):
    trace = _trace(tmp_path, 4_000, requests=3)
    with running_target(TargetConfig(ttft_ms=50, itl_ms=1, tokens=4)) as (_, port):
        plan = ScanPlan(base_url=f"http://127.0.0.1:{port}/v1", model=MODEL_ID, levels=(1,),
                        requests=6, max_tokens=4, timeout_s=30.0, use_nvidia_smi=False,
                        trace=trace).validate()
        lefts: list[str] = []
        with ScanBars(plan, console=Console(file=io.StringIO(), width=80)) as bars:
            def watch(level, completed, total, record=None):
                bars(level, completed, total, record)
                lefts.append(bars.left_text())
            run_scan(plan, progress=watch, trace_progress=bars.trace, tune_gc=False)
    # while the level ran, the 4 s replay was still to come
    during = [text for text in lefts[1:-1] if text]
    assert during, lefts
    assert all(int(text.removeprefix("~").split(" ")[0]) >= 4 for text in during), during
