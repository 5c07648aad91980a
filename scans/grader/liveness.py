"""Liveness probes: the preflight alone (``GET /models`` and one short streamed request), for
many endpoints at once, with no load.

A probe is what a scan's preflight does, under the same rules and in the same words (its cause
is the preflight's sentence, the API key masked); it only says whether the endpoint answers,
how fast its first token came, and why not. Probes of many endpoints share one transport (one
pool of keep-alive connections per origin, every connection through the connect guard) and one
event loop, at most `concurrency` in flight, so one process probes hundreds a second.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass

import httpx

from .guarded_backend import ConnectGuard
from .load import ScanLoad
from .plan import ScanPlan
from .preflight import failure_phrase, run_preflight
from .runner import LOOP_LAG_THRESHOLD_MS, client_headers
from .transport import ScanTransport

__all__ = ["GUARD_REFUSED", "OUR_SIDE", "PROBE_ERROR", "PROBE_MAX_TOKENS", "PROBE_TIMEOUT_S",
           "LivenessResult", "probe_many", "probe_plan"]

#: One short reply: enough for a first token, never a load.
PROBE_MAX_TOKENS = 4
#: A probe waits at most this long, whatever the endpoint's own scan timeout is: a probe that
#: hangs for a minute would hold the next one back.
PROBE_TIMEOUT_S = 15.0
#: Kinds of a result that says nothing about the endpoint: the outbound guard refused its
#: address (the site's rule), or the probe itself failed on our side.
GUARD_REFUSED, PROBE_ERROR = "guard_refused", "probe_error"
OUR_SIDE = frozenset({GUARD_REFUSED, PROBE_ERROR})
#: Probes in flight at once in one process.
DEFAULT_CONCURRENCY = 256


@dataclass(frozen=True)
class LivenessResult:
    """One probe of one endpoint.

    - `ok`: the streamed request got a complete answer (any failure, a 5xx included, is not ok).
    - `reachable`: the server gave an HTTP answer (to /models or the request).
    - `status_code`: the request's HTTP status (None: no answer).
    - `ttft_ms`: time to the first token of the answer (ok probes only).
    - `cause`, `kind`: the preflight's sentence and kind when not ok ("" when ok); a kind in
      OUR_SIDE says nothing about the endpoint.
    - `model_listed`: whether /models lists the model (None: no usable list).
    """

    ok: bool
    reachable: bool
    status_code: int | None
    ttft_ms: float | None
    cause: str
    kind: str
    model_listed: bool | None
    duration_ms: float


def probe_plan(base_url: str, model: str, api_key: str | None, timeout_s: float,
               extra_headers: tuple[tuple[str, str], ...] = ()) -> ScanPlan:
    """The plan a probe runs: the endpoint's address, model and key, one short request."""
    return ScanPlan(base_url=base_url, model=model, levels=(1,), requests=1,
                    max_tokens=PROBE_MAX_TOKENS, timeout_s=min(timeout_s, PROBE_TIMEOUT_S),
                    api_key=api_key, use_nvidia_smi=False, extra_headers=extra_headers)


async def _probe(plan: ScanPlan, transport: ScanTransport) -> LivenessResult:
    started = time.perf_counter()
    timeout = httpx.Timeout(connect=plan.timeout_s, read=None, write=plan.timeout_s, pool=None)
    # Not closed after the probe: closing a client closes its transport, which the other
    # probes share (the client itself holds nothing else).
    client = httpx.AsyncClient(transport=transport, timeout=timeout, follow_redirects=False,
                               trust_env=False, headers=client_headers(plan))
    load = ScanLoad(plan, client, None, LOOP_LAG_THRESHOLD_MS, precise_stale_detection=True)
    preflight = await run_preflight(plan, client, load.request)
    probe = preflight.probe
    ok = probe.failure is None
    kind = preflight.kind or ""
    if probe.failure == "transport_error" and failure_phrase(
            probe.failure, probe.error) == "the address was refused by the outbound guard":
        kind = GUARD_REFUSED  # the site's rule, not the endpoint's answer
    return LivenessResult(
        ok=ok, reachable=preflight.server_answered, status_code=probe.status_code,
        ttft_ms=probe.ttft_ms if ok else None, cause=preflight.cause or "",
        kind=kind, model_listed=preflight.models.model_listed,
        duration_ms=(time.perf_counter() - started) * 1000.0)


async def probe_many(plans: Sequence[ScanPlan], *, connect_guard: ConnectGuard | None,
                     concurrency: int = DEFAULT_CONCURRENCY,
                     local_address: str | None = None) -> list[LivenessResult]:
    """Probe each plan's endpoint, at most `concurrency` at once; results in the plans' order.
    Never raises for an endpoint's failure: each is a result. `local_address`: the address
    the probes leave from (None: the system's choice)."""
    transport = ScanTransport(connect_guard=connect_guard, local_address=local_address)
    gate = asyncio.Semaphore(concurrency)

    async def one(plan: ScanPlan) -> LivenessResult:
        async with gate:
            try:
                return await _probe(plan, transport)
            except Exception as exc:  # our side failed: said as such, never a crash of all
                return LivenessResult(False, False, None, None,
                                      f"the probe failed on our side ({type(exc).__name__})",
                                      PROBE_ERROR, None, 0.0)

    try:
        return list(await asyncio.gather(*(one(plan) for plan in plans)))
    finally:
        await transport.aclose()
