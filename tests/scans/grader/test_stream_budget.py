"""The stream budget scans of one worker process share (scans/grader/budget.py): never more
streams in flight than the budget, first come first served, nothing lost to a cancelled wait
or a failed level."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading

import pytest

from scans.grader import ScanPlan, run_scan
from scans.grader.budget import StreamBudget
from scans.grader.demo_server import TargetConfig, running_target


def test_scans_in_threads_never_have_more_streams_in_flight_than_the_budget():
    """Three scans at once, each on its own thread and event loop, as in the worker: their
    levels (1, 4, 8) would reach 3 x 8 = 24 streams together; with a budget of 10 the levels
    that overlap in time never add up to more than 10, and every scan still measures every
    level with every request answered."""
    budget = StreamBudget(10)
    measurements = []
    with running_target(TargetConfig(ttft_ms=30, itl_ms=5, tokens=8)) as (host, port):
        plan = ScanPlan(base_url=f"http://{host}:{port}/v1", model="m", levels=(1, 4, 8),
                        requests=(2, 8, 16), max_tokens=8, timeout_s=30)

        def scan() -> None:
            measurements.append(run_scan(plan, stream_budget=budget))

        threads = [threading.Thread(target=scan) for _ in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
    assert len(measurements) == 3
    levels = [level for m in measurements for level in m.levels]
    assert sorted(level.concurrency for level in levels) == [1, 1, 1, 4, 4, 4, 8, 8, 8]
    assert all(r.failure is None for level in levels for r in level.requests)
    # At each level's start, the streams of every level running then (itself included).
    for level in levels:
        running = [other for other in levels
                   if other.started_at <= level.started_at < other.finished_at]
        assert sum(other.concurrency for other in running) <= 10
    # The top levels could not all run together: at least two of them took turns.
    tops = sorted((lv.started_at, lv.finished_at) for lv in levels if lv.concurrency == 8)
    assert any(finished <= started for (_, finished), (started, _) in itertools.pairwise(tops))
    assert budget.in_flight == 0


async def _held(budget: StreamBudget, streams: int, entered: asyncio.Event, leave: asyncio.Event):
    async with budget.level(streams):
        entered.set()
        await leave.wait()


def test_waiters_are_served_in_arrival_order_so_a_large_level_is_not_starved():
    async def scenario() -> list[str]:
        budget = StreamBudget(4)
        order: list[str] = []
        first_in, first_out = asyncio.Event(), asyncio.Event()
        holder = asyncio.create_task(_held(budget, 3, first_in, first_out))
        await first_in.wait()

        async def level(name: str, streams: int) -> None:
            async with budget.level(streams):
                order.append(name)
                await asyncio.sleep(0)

        large = asyncio.create_task(level("large", 4))
        await asyncio.sleep(0.01)
        small = asyncio.create_task(level("small", 1))  # would fit now, but arrived later
        await asyncio.sleep(0.05)
        assert order == []
        first_out.set()
        await asyncio.gather(holder, large, small)
        assert budget.in_flight == 0
        return order

    assert asyncio.run(scenario()) == ["large", "small"]


def test_a_level_larger_than_the_budget_runs_alone_with_the_whole_budget():
    async def scenario() -> None:
        budget = StreamBudget(4)
        async with budget.level(16):
            assert budget.in_flight == 4
        assert budget.in_flight == 0

    asyncio.run(scenario())


def test_a_cancelled_wait_and_a_failed_level_give_their_streams_back():
    async def scenario() -> None:
        budget = StreamBudget(4)
        entered, leave = asyncio.Event(), asyncio.Event()
        holder = asyncio.create_task(_held(budget, 4, entered, leave))
        await entered.wait()
        waiting = asyncio.create_task(_held(budget, 2, asyncio.Event(), asyncio.Event()))
        await asyncio.sleep(0.01)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        leave.set()
        await holder
        assert budget.in_flight == 0

        with pytest.raises(RuntimeError):
            async with budget.level(3):
                raise RuntimeError("the level failed")
        assert budget.in_flight == 0
        async with budget.level(4):  # the whole budget is there again
            assert budget.in_flight == 4

    asyncio.run(scenario())


def test_a_budget_needs_at_least_one_stream():
    with pytest.raises(ValueError, match="at least one stream"):
        StreamBudget(0)


def test_a_level_whose_wait_runs_out_starts_without_a_share():
    async def scenario() -> None:
        budget = StreamBudget(4)
        entered, leave = asyncio.Event(), asyncio.Event()
        holder = asyncio.create_task(_held(budget, 4, entered, leave))
        await entered.wait()
        async with budget.level(2, max_wait_s=0.05) as granted:
            assert granted is False and budget.in_flight == 4
        assert budget.in_flight == 4  # it took nothing, so it gives nothing back
        leave.set()
        await holder
        assert budget.in_flight == 0

    asyncio.run(scenario())


def test_a_release_and_a_cancel_in_the_same_tick_lose_no_stream():
    async def scenario() -> None:
        budget = StreamBudget(2)
        for _ in range(50):
            entered, leave = asyncio.Event(), asyncio.Event()
            holder = asyncio.create_task(_held(budget, 2, entered, leave))
            await entered.wait()
            waiting = asyncio.create_task(_held(budget, 2, asyncio.Event(), asyncio.Event()))
            await asyncio.sleep(0)
            leave.set()
            waiting.cancel()
            await holder
            with contextlib.suppress(asyncio.CancelledError):
                await waiting
            await asyncio.sleep(0)  # a grant scheduled for the cancelled waiter has run
            assert budget.in_flight == 0

    asyncio.run(scenario())


def test_a_scan_waits_for_the_budget_at_most_its_scan_wait_then_runs_its_levels():
    """A neighbour holds the whole budget and does not let go: the scan waits its
    `scan_wait_s` (over all its levels), then measures every level anyway."""
    budget = StreamBudget(4, scan_wait_s=0.3)
    holding, release = threading.Event(), threading.Event()

    async def neighbour() -> None:
        async with budget.level(4):
            holding.set()
            await asyncio.to_thread(release.wait, 120)

    other = threading.Thread(target=asyncio.run, args=(neighbour(),))
    other.start()
    try:
        assert holding.wait(30)
        with running_target(TargetConfig(ttft_ms=5, itl_ms=1, tokens=4)) as (host, port):
            plan = ScanPlan(base_url=f"http://{host}:{port}/v1", model="m", levels=(1, 2),
                            requests=(2, 2), max_tokens=4, timeout_s=30)
            measurement = run_scan(plan, stream_budget=budget)
        assert [level.concurrency for level in measurement.levels] == [1, 2]
        assert all(r.failure is None for level in measurement.levels for r in level.requests)
        assert budget.in_flight == 4  # still the neighbour's: the scan took none
    finally:
        release.set()
        other.join(timeout=30)
    assert budget.in_flight == 0
