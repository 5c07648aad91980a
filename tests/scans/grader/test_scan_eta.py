"""The whole scan's time left: the level running by its own estimate, then every
level still to come at the request time measured so far; the capacity search, whose levels are
not known ahead, is named as left out. A clock the test moves, then a real scan of
`tokvera target` on loopback."""

from __future__ import annotations

from types import SimpleNamespace

from scans.grader import ScanPlan, run_scan
from scans.grader.demo_server import MODEL_ID, TargetConfig, running_target
from scans.grader.progress import ScanProgress, progress_text
from scans.grader.workload import Workload


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _record() -> SimpleNamespace:
    return SimpleNamespace(succeeded=True, ttft_ms=100.0, output_chunks=4, completion_tokens=4)


def _plan(**fields) -> ScanPlan:
    return ScanPlan(**{"base_url": "http://127.0.0.1:9/v1", "model": MODEL_ID, "levels": (1, 4),
                       "requests": 8, **fields})


def _run_first_level_half_way(progress: ScanProgress, clock: Clock) -> dict:
    """Level 1 of (1, 4), 8 requests each: 4 done after 2 s, one request every 0.5 s."""
    progress(1, 0, 8)
    for done in range(1, 5):
        clock.now += 0.5
        progress(1, done, 8, _record())
    return progress.snapshot()


def test_the_whole_scans_time_left_counts_the_levels_still_to_come():
    clock = Clock()
    progress = ScanProgress(clock=clock)
    progress.expect(_plan())

    half_way = _run_first_level_half_way(progress, clock)
    # This level: 4 more at 0.5 s = 2 s. The next: 8 requests on 4 streams, 2 rounds of one
    # request time (0.5 s at concurrency 1) = 1 s more.
    assert half_way["eta_s"] == 2.0
    assert half_way["scan_eta_s"] == 3.0
    assert half_way["scan_eta_excludes"] == ""
    assert progress_text(half_way).endswith(
        "about 2 s left in this level · about 3 s left in the scan")

    for done in range(5, 9):
        clock.now += 0.5
        progress(1, done, 8, _record())
    progress(4, 0, 8)  # the last level starts: none of its requests has ended yet
    last_level = progress.snapshot()
    assert last_level["eta_s"] is None
    assert last_level["scan_eta_s"] == 1.0  # from the request time the first level measured
    assert progress_text(last_level).endswith("about 1 s left in the scan")


def test_a_single_level_scan_says_its_time_left_once():
    clock = Clock()
    progress = ScanProgress(clock=clock)
    progress.expect(_plan(levels=(1,)))
    half_way = _run_first_level_half_way(progress, clock)
    assert half_way["scan_eta_s"] == half_way["eta_s"] == 2.0
    assert "left in the scan" not in progress_text(half_way)


def test_warm_up_and_open_loop_levels_are_counted_and_the_capacity_search_named():
    clock = Clock()
    progress = ScanProgress(clock=clock)
    plan = _plan(find_capacity=True)
    progress.expect(plan)
    half_way = _run_first_level_half_way(progress, clock)
    assert half_way["scan_eta_s"] == 3.0
    assert half_way["scan_eta_excludes"] == "the capacity search"
    assert progress_text(half_way).endswith("about 3 s left in the scan, plus the capacity search")

    # Two warm-up requests before each level (at concurrency 4: one round, 0.5 s).
    clock = Clock()
    warm = ScanProgress(clock=clock)
    warm.expect(_plan(workload=Workload(warmup=2)))
    assert _run_first_level_half_way(warm, clock)["scan_eta_s"] == 3.5


def test_before_the_first_request_time_there_is_no_estimate():
    progress = ScanProgress(clock=Clock())
    progress.expect(_plan())
    assert "scan_eta_s" not in progress.snapshot()  # the preflight
    progress(1, 0, 8)
    assert progress.snapshot()["scan_eta_s"] is None
    assert "left" not in progress_text(progress.snapshot())


def test_a_real_scans_time_left_goes_down_to_nothing():
    seen: list[dict] = []
    progress = ScanProgress()

    def watch(level, completed, total, record=None):
        progress(level, completed, total, record)
        seen.append(progress.snapshot())

    # Slow enough that the second level's part (3 request times) is seconds, not hidden by
    # the snapshot's rounding to 0.1 s.
    with running_target(TargetConfig(ttft_ms=200, itl_ms=1, tokens=4)) as (_, port):
        plan = ScanPlan(base_url=f"http://127.0.0.1:{port}/v1", model=MODEL_ID, levels=(1, 2),
                        requests=6, max_tokens=4, timeout_s=30.0, use_nvidia_smi=False).validate()
        progress.expect(plan)
        run_scan(plan, progress=watch, tune_gc=False)

    first_level = [s for s in seen if s["concurrency"] == 1 and s["completed"] < 6
                   and s["scan_eta_s"] is not None]
    assert first_level, seen
    # While the first level runs, the scan has the second level left besides it.
    assert all(s["scan_eta_s"] > s["eta_s"] for s in first_level)
    assert seen[-1]["scan_eta_s"] == 0.0
