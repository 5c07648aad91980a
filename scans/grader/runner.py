"""The scan runner: the preflight, the plan's levels, the capacity search, the rate levels and
the trace replay, then the probes, into one ``Measurement``. How each level is sent and timed is load.py's.

One entry point, used by the CLI and the Celery task alike: ``run_scan(plan)`` (sync; runs its
own event loop) or ``await run_scan_async(plan)``. Neither touches global state.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime

import httpx

from .apis import auth_headers
from .budget import StreamBudget
from .capacity import CapacitySearch
from .guarded_backend import ConnectGuard
from .load import LOOP_LAG_INTERVAL_S, ProgressCallback, RateProgressCallback, ScanLoad
from .measurement import AgentRecord, LevelResult, Measurement, ModelsListing, RequestRecord
from .objective import evaluate_level
from .plan import MAX_LEVEL, ScanPlan
from .preflight import fetch_models, probe_replicas, run_preflight
from .probes import GpuSampler, cost_per_1000_requests, probe_metrics
from .server_identity import MetricsStatements, read_statements, server_identity
from .stopping import until_stopped
from .stream import JSON_IMPL
from .trace_replay import TraceBodies, prepare_trace, run_trace
from .transport import ScanTransport

__all__ = [
    "GC_GEN0_THRESHOLD",
    "LOOP_LAG_THRESHOLD_MS",
    "TraceProgressCallback",
    "list_models",
    "run_scan",
    "run_scan_async",
]

#: A level whose p99 loop lag (ms) exceeds this is client-bound. See DECISIONS.md.
LOOP_LAG_THRESHOLD_MS = 50.0
#: ``trace_progress(completed, total, record)``: the trace replay's progress (record None when
#: it starts).
TraceProgressCallback = Callable[[int, int, RequestRecord | None], None]
TOOL_NAME = "tokvera-scan"


@functools.cache  # read from the installed package's metadata: a file read each time
def _tool_version() -> str:
    try:
        from importlib.metadata import version

        return version("tokvera-site")
    except Exception:  # pragma: no cover - not installed
        return "0+unknown"


def _now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def client_headers(plan: ScanPlan) -> dict[str, str]:
    headers = {
        "content-type": "application/json",
        "accept": "text/event-stream",
        "accept-encoding": "identity",
        "user-agent": f"{TOOL_NAME}/{_tool_version()}",
    }
    for name, value in plan.extra_headers:
        headers[name.lower()] = value
    headers.update(auth_headers(plan.api, plan.api_key))
    return headers


async def run_scan_async(
    plan: ScanPlan,
    progress: ProgressCallback | None = None,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
    connect_guard: ConnectGuard | None = None,
    lag_threshold_ms: float = LOOP_LAG_THRESHOLD_MS,
    preflight_only: bool = False,
    stream_budget: StreamBudget | None = None,
    rate_progress: RateProgressCallback | None = None,
    trace_progress: TraceProgressCallback | None = None,
) -> Measurement:
    """Run the preflight (``preflight.run_preflight``), then every level of `plan` unless the
    preflight stopped the scan or `preflight_only`; return what was measured.

    `transport`: an httpx transport to send everything through (the load, the /metrics probe,
    the server's identity, the DCGM exporter). By default a ``ScanTransport``;
    `connect_guard(host, port, ip)` is called for every address of every connection it opens
    and refuses it by raising. Pass one or the other, not both (build your transport with the
    guard in it).
    """
    plan.validate()
    if transport is not None and connect_guard is not None:
        raise ValueError("pass connect_guard or transport, not both")
    own_transport = transport or ScanTransport(connect_guard=connect_guard)
    timeout = httpx.Timeout(connect=min(plan.timeout_s, 30.0), read=None,
                            write=plan.timeout_s, pool=None)
    started_at = _now_iso()
    origin_time = time.perf_counter()
    async with httpx.AsyncClient(transport=own_transport, timeout=timeout,
                                 follow_redirects=False, trust_env=False,
                                 headers=client_headers(plan)) as client:
        scan = ScanLoad(plan, client, progress, lag_threshold_ms,
                     precise_stale_detection=isinstance(own_transport, ScanTransport),
                     rate_progress=rate_progress)
        # What the server says of itself, asked before the preflight and never beside a stream:
        # a server (or gateway) that counts every request against one slot would refuse the
        # probe while a side request held it. Each GET closes its own connection, so the
        # probe's keep-alive connection is still the one the load reuses.
        statements = await read_statements(client, plan.origin, min(plan.timeout_s, 10.0))
        preflight = await run_preflight(plan, client, scan.request)
        levels: list[LevelResult] = []
        searched: list[LevelResult] = []
        rate_levels: list[LevelResult] = []
        skipped: list[dict] = []
        replica_probes: list[AgentRecord] = []
        exhausted = False
        trace_bodies: TraceBodies | None = None
        trace_level: LevelResult | None = None
        if not preflight.stopped and plan.replicas:
            # ReplicaError (one line naming the URL) before any load.
            replica_probes = await probe_replicas(plan, scan.request_at)
        if not (preflight.stopped or preflight_only):
            await scan.prepare()  # WorkloadError (one line) before any load
            if plan.trace is not None:  # the same: the trace's lengths against the server
                trace_bodies = await prepare_trace(scan)
        if preflight.stopped or preflight_only:
            levels, gpu = preflight.without_load(lag_threshold_ms)
        else:
            sampler = GpuSampler(client, dcgm_url=plan.dcgm_url, target_host=plan.host,
                                 use_nvidia_smi=plan.use_nvidia_smi)
            sampler.start()
            try:
                wait_left = stream_budget.scan_wait_s if stream_budget else None
                for concurrency in plan.levels:
                    if (stop := _saturated(levels)) is not None:
                        skipped.append(_skipped("level", stop, concurrency=concurrency))
                        continue
                    sampler.level = None  # GPU samples taken while waiting belong to no level
                    waiting_since = time.perf_counter()
                    async with (stream_budget.level(concurrency, wait_left) if stream_budget
                                else contextlib.nullcontext()):
                        if wait_left is not None:
                            wait_left = max(0.0, wait_left - (time.perf_counter() - waiting_since))
                        await scan.warm_up(concurrency, plan.workload.warmup)
                        sampler.level = concurrency
                        levels.append(await scan.run_level(concurrency,
                                                           plan.requests_at(concurrency)))
            finally:
                gpu = await sampler.stop()
            # After the GPU sampler stopped: nothing the search measures reaches a check.
            stop = _saturated(levels)
            if plan.find_capacity and plan.slo is not None and stop is None:
                exhausted = await _search(scan, plan, levels, searched, stream_budget,
                                          wait_left)
            trace_level = await _open_loop(scan, plan, stop or _saturated(searched), skipped,
                                           rate_levels, trace_bodies, trace_progress)
        metrics_statements = MetricsStatements()
        if preflight.server_answered and not preflight_only:
            metrics = await probe_metrics(client, plan.origin,
                                          timeout=min(plan.timeout_s, 10.0),
                                          read_samples=metrics_statements.read)
        else:
            metrics = preflight.metrics_not_probed(plan.origin)
    finished_at = _now_iso()
    records = [r for level in levels for r in level.requests]
    cost = cost_per_1000_requests(records, plan.price_input_per_mtok,
                                  plan.price_output_per_mtok)
    loop = asyncio.get_running_loop()
    return Measurement(
        base_url=plan.base_url,
        model=plan.model,
        started_at=started_at,
        finished_at=finished_at,
        levels=levels,
        metrics=metrics,
        gpu=gpu,
        cost=cost,
        loop_lag_threshold_ms=lag_threshold_ms,
        origin_time=origin_time,
        preflight=preflight,
        workload=scan.workload.public_dict(),
        searched_levels=searched,
        search_exhausted=exhausted,
        rate_levels=rate_levels,
        replica_probes=replica_probes,
        skipped_levels=skipped,
        trace_level=trace_level,
        trace=_trace_facts(trace_bodies, trace_level),
        api=plan.api,
        server=server_identity(statements, preflight.models, metrics_statements, metrics),
        scanner={
            "tool": TOOL_NAME,
            "version": _tool_version(),
            "event_loop": type(loop).__module__.split(".")[0],
            "json": JSON_IMPL,
            "transport": type(own_transport).__name__,
            "loop_lag_interval_ms": LOOP_LAG_INTERVAL_S * 1000.0,
            "loop_lag_threshold_ms": lag_threshold_ms,
        },
    )


async def _open_loop(scan: ScanLoad, plan: ScanPlan, stop: LevelResult | None,
                     skipped: list[dict], rate_levels: list[LevelResult],
                     trace_bodies: TraceBodies | None,
                     trace_progress: TraceProgressCallback | None) -> LevelResult | None:
    """The rate levels (appended to `rate_levels`), then the trace replay (returned): measured,
    never graded, after everything else; skipped when a level stopped early (`stop`)."""
    if plan.open_loop is not None:
        for index, rate in enumerate(plan.open_loop.rates):
            if stop is not None:
                skipped.append(_skipped("rate", stop, rate_per_s=rate))
                continue
            await scan.warm_up(1, plan.workload.warmup)
            rate_levels.append(await scan.run_rate_level(
                rate, plan.open_loop.requests_at(rate), index))
    if trace_bodies is None:
        return None
    if stop is not None:
        skipped.append(_skipped("trace", stop))
        return None
    await scan.warm_up(1, plan.workload.warmup)
    return await run_trace(scan, trace_bodies, trace_progress)


def _trace_facts(bodies: TraceBodies | None, level: LevelResult | None) -> dict | None:
    """How the trace's prompts were prepared, and the trace line of each request replayed."""
    if bodies is None:
        return None
    lines = [bodies.spec.trace.requests[r.index].line for r in level.requests] if level else []
    return {"preparation": bodies.facts, "lines": lines}


def _saturated(levels: list[LevelResult]) -> LevelResult | None:
    """The level that stopped early (--stop-on-saturation), if one did: nothing runs after."""
    return next((level for level in levels if level.stopped_early is not None), None)


def _skipped(phase: str, stop: LevelResult, *, concurrency: int | None = None,
             rate_per_s: float | None = None) -> dict:
    assert stop.stopped_early is not None
    return {"phase": phase, "concurrency": concurrency, "rate_per_s": rate_per_s,
            "reason": (f"concurrency {stop.concurrency} stopped early: "
                       f"{stop.stopped_early['reason']}")}


async def _search(scan: ScanLoad, plan: ScanPlan, levels: list[LevelResult],
                  searched: list[LevelResult], stream_budget: StreamBudget | None = None,
                  wait_left: float | None = None) -> bool:
    """Run the levels the capacity search (capacity.py) asks for, appending them to
    `searched`; True when it stopped at its bound rather than at the boundary it sought. Each
    searched level waits for the stream budget like a plan level (the site's workers share
    one per process)."""
    assert plan.slo is not None
    warmup = plan.workload.warmup
    search = CapacitySearch({lv.concurrency: evaluate_level(lv, plan.slo)["met"] for lv in levels},
                            max_level=min(MAX_LEVEL, plan.search_max_level),
                            max_levels=plan.search_levels,
                            max_requests=plan.search_max_requests, warmup=warmup)
    while (step := search.next_level()) is not None:
        nxt, count = step
        waiting_since = time.perf_counter()
        async with (stream_budget.level(nxt, wait_left) if stream_budget
                    else contextlib.nullcontext()):
            if wait_left is not None:
                wait_left = max(0.0, wait_left - (time.perf_counter() - waiting_since))
            await scan.warm_up(nxt, warmup)
            level = await scan.run_level(nxt, count)
        searched.append(level)
        if level.stopped_early is not None:  # --stop-on-saturation: nothing runs after it
            break
        search.record(nxt, count, evaluate_level(level, plan.slo)["met"])
    return search.exhausted


#: During a scan the youngest GC generation is collected after this many allocations instead of
#: Python's 700: a stream allocates a handful of short-lived objects per chunk, and with the
#: default threshold the collector took a fifth of the grader's CPU at 128 streams.
GC_GEN0_THRESHOLD = 100_000


@contextlib.contextmanager
def _gc_tuned(enabled: bool):
    """Freeze the objects that exist before the scan and collect the young generation less
    often while it runs; both are restored afterwards."""
    if not enabled:
        yield
        return
    old = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(max(old[0], GC_GEN0_THRESHOLD), *old[1:])
    try:
        yield
    finally:
        gc.set_threshold(*old)
        gc.unfreeze()


def _loop_factory(use_uvloop: bool | None) -> Callable[[], asyncio.AbstractEventLoop] | None:
    if use_uvloop is False:
        return None
    try:
        import uvloop
    except ImportError:
        if use_uvloop:
            raise
        return None
    return uvloop.new_event_loop


def run_scan(
    plan: ScanPlan,
    progress: ProgressCallback | None = None,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
    connect_guard: ConnectGuard | None = None,
    lag_threshold_ms: float = LOOP_LAG_THRESHOLD_MS,
    use_uvloop: bool | None = None,
    tune_gc: bool = True,
    preflight_only: bool = False,
    stream_budget: StreamBudget | None = None,
    rate_progress: RateProgressCallback | None = None,
    stop: threading.Event | None = None,
    trace_progress: TraceProgressCallback | None = None,
) -> Measurement:
    """Synchronous wrapper of `run_scan_async` on a fresh event loop (uvloop when installed,
    unless `use_uvloop` is False). Must not be called from a running event loop.

    `tune_gc`: while the scan runs, raise the garbage collector's young-generation threshold
    (``GC_GEN0_THRESHOLD``) and freeze older objects; both are restored when it returns.
    `stop`: set from another thread, it stops the scan within ``stopping.STOP_POLL_S`` (its
    requests abandoned) and ``stopping.ScanStopped`` is raised."""
    with _gc_tuned(tune_gc), asyncio.Runner(loop_factory=_loop_factory(use_uvloop)) as runner:
        scan = run_scan_async(plan, progress, transport=transport,
                              connect_guard=connect_guard,
                              lag_threshold_ms=lag_threshold_ms,
                              preflight_only=preflight_only,
                              stream_budget=stream_budget,
                              rate_progress=rate_progress,
                              trace_progress=trace_progress)
        return runner.run(scan if stop is None else until_stopped(scan, stop))


def list_models(plan: ScanPlan, *, connect_guard: ConnectGuard | None = None) -> ModelsListing:
    """Only the preflight's ``GET {base}/models``, with the scan's client (its headers, API key
    and connect guard): what a server lists before anyone has picked one of its models.
    `plan.model` may be blank here; it only decides ``model_listed``."""

    async def listing() -> ModelsListing:
        timeout = httpx.Timeout(min(plan.timeout_s, 10.0))
        async with httpx.AsyncClient(transport=ScanTransport(connect_guard=connect_guard),
                                     timeout=timeout, follow_redirects=False, trust_env=False,
                                     headers=client_headers(plan)) as client:
            return await fetch_models(client, plan.base_url, plan.model,
                                      min(plan.timeout_s, 10.0))

    with asyncio.Runner() as runner:
        return runner.run(listing())
