"""Side measurements: the /metrics probe, GPU utilization sampling, and cost per 1,000 requests."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import shutil
import time
from collections.abc import Callable, Iterable
from decimal import Decimal

import httpx
from prometheus_client.parser import text_string_to_metric_families

from .measurement import CostFigure, GpuReading, MetricsProbe, RequestRecord

__all__ = [
    "GpuSampler",
    "cost_per_1000_requests",
    "is_loopback_host",
    "parse_prometheus_samples",
    "probe_metrics",
]

_MAX_METRICS_BYTES = 2 * 1024 * 1024
DCGM_UTIL = "DCGM_FI_DEV_GPU_UTIL"


def parse_prometheus_samples(text: str) -> list[tuple[str, dict, float]]:
    """All samples of a Prometheus exposition text as (name, labels, value).

    Raises ValueError when the text does not parse (an HTML page, say)."""
    stripped = text.lstrip()
    if stripped.startswith("<"):
        raise ValueError("looks like HTML, not Prometheus text")
    samples = []
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                samples.append((sample.name, dict(sample.labels), float(sample.value)))
    except Exception as exc:  # the parser raises several types for malformed text
        raise ValueError(f"not Prometheus text: {exc}") from exc
    return samples


async def _get_text(client: httpx.AsyncClient, url: str, timeout: float) -> tuple[int, str]:
    async with asyncio.timeout(timeout):
        async with client.stream("GET", url, headers={"accept": "text/plain"}) as response:
            body = bytearray()
            async for piece in response.aiter_bytes():
                body += piece
                if len(body) > _MAX_METRICS_BYTES:
                    raise ValueError("body larger than 2 MiB")
            return response.status_code, body.decode("utf-8", errors="replace")


async def probe_metrics(client: httpx.AsyncClient, origin: str, timeout: float = 10.0, *,
                        read_samples: Callable[[list[tuple[str, dict, float]]], None] | None
                        = None) -> MetricsProbe:
    """``GET {origin}/metrics``; present only for a 200 whose body parses as Prometheus
    exposition text with at least one sample. Anything else is absent, with the detail.
    `read_samples` is handed the parsed samples (what the server says of itself is read
    from them: scans.grader.server_identity), so nothing fetches /metrics twice."""
    url = f"{origin}/metrics"
    try:
        status, text = await _get_text(client, url, timeout)
    except TimeoutError:
        return MetricsProbe(url, False, "timed out")
    except (httpx.HTTPError, ValueError, OSError) as exc:
        return MetricsProbe(url, False, f"no answer: {type(exc).__name__}: {exc}"[:300])
    if status != 200:
        return MetricsProbe(url, False, f"answered HTTP {status}")
    try:
        samples = parse_prometheus_samples(text)
    except ValueError as exc:
        return MetricsProbe(url, False, str(exc)[:300])
    if not samples:
        return MetricsProbe(url, False, "Prometheus text without a sample")
    if read_samples is not None:
        read_samples(samples)
    return MetricsProbe(url, True, f"{len(samples)} samples", samples=len(samples))


def is_loopback_host(host: str) -> bool:
    host = host.strip("[]")
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


# Why a scan that was told not to read this machine's GPUs (the site's workers) has none.
NOT_SAMPLED_HERE = ("no GPU source: this scanner does not read its own machine's GPUs and no "
                    "--dcgm-url was given")


class GpuSampler:
    """Samples GPU utilization every `interval` seconds while the load runs.

    Source: ``dcgm_url`` (a DCGM exporter's metrics, ``DCGM_FI_DEV_GPU_UTIL``) when given;
    otherwise ``nvidia-smi`` when the target is on loopback and the command exists; else none.
    """

    def __init__(self, client: httpx.AsyncClient, *, dcgm_url: str | None, target_host: str,
                 use_nvidia_smi: bool = True, interval: float = 1.0) -> None:
        self._client = client
        self._dcgm_url = dcgm_url
        self._interval = interval
        self._nvidia_smi = None
        self.reason: str | None = None
        self.source: str | None = None
        if dcgm_url:
            self.source = "dcgm"
        elif use_nvidia_smi and is_loopback_host(target_host):
            self._nvidia_smi = shutil.which("nvidia-smi")
            if self._nvidia_smi:
                self.source = "nvidia-smi"
            else:
                self.reason = "no GPU source: nvidia-smi not found and no --dcgm-url given"
        elif not use_nvidia_smi:  # the site's workers: their own GPUs are not the target's
            self.reason = NOT_SAMPLED_HERE
        else:
            self.reason = ("no GPU source: the target is not on loopback (nvidia-smi would "
                           "read this machine's GPUs) and no --dcgm-url was given")
        self.samples: list[dict] = []
        self.errors: list[str] = []
        self.level: int | None = None
        self._task: asyncio.Task | None = None
        self._t0 = time.perf_counter()

    def start(self) -> None:
        if self.source is not None:
            self._task = asyncio.create_task(self._run())

    async def stop(self) -> GpuReading:
        if self._task is not None:
            if not self.samples:  # a short load: let the first sample finish (bounded)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(5.0):
                        while not self.samples and not self._task.done() and not self.errors:
                            await asyncio.sleep(0.01)
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        if self.source is None:
            return GpuReading(None, None, self.reason, [])
        values = [s["utilization"] for s in self.samples]
        if not values:
            detail = f" ({self.errors[0]})" if self.errors else ""
            return GpuReading(self.source, None, f"no GPU utilization sample from "
                              f"{self.source}{detail}", [])
        return GpuReading(self.source, max(values), None, self.samples)

    async def _run(self) -> None:
        while True:
            try:
                readings = await (self._dcgm() if self.source == "dcgm" else self._smi())
                t = round((time.perf_counter() - self._t0) * 1000.0, 1)
                for gpu, share in readings:
                    self.samples.append({"t_ms": t, "level": self.level, "gpu": gpu,
                                         "utilization": share})
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if len(self.errors) < 5:
                    self.errors.append(f"{type(exc).__name__}: {exc}"[:200])
            await asyncio.sleep(self._interval)

    async def _dcgm(self) -> list[tuple[str, float]]:
        assert self._dcgm_url is not None
        status, text = await _get_text(self._client, self._dcgm_url, 5.0)
        if status != 200:
            raise ValueError(f"DCGM exporter answered HTTP {status}")
        readings: list[tuple[str, float]] = []
        for name, labels, value in parse_prometheus_samples(text):
            if name == DCGM_UTIL:
                gpu = labels.get("gpu") or labels.get("UUID") or str(len(readings))
                readings.append((gpu, max(0.0, min(1.0, value / 100.0))))
        if not readings:
            raise ValueError(f"no {DCGM_UTIL} sample in the exporter's metrics")
        return readings

    async def _smi(self) -> list[tuple[str, float]]:
        assert self._nvidia_smi is not None
        proc = await asyncio.create_subprocess_exec(
            self._nvidia_smi, "--query-gpu=index,utilization.gpu",
            "--format=csv,noheader,nounits",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
        )
        try:
            async with asyncio.timeout(5.0):
                out, _ = await proc.communicate()
        except TimeoutError:
            proc.kill()
            raise
        readings = []
        for line in out.decode(errors="replace").splitlines():
            index, _, util = line.partition(",")
            with contextlib.suppress(ValueError):
                readings.append((index.strip(), max(0.0, min(1.0, float(util) / 100.0))))
        if not readings:
            raise ValueError("nvidia-smi printed no utilization")
        return readings


def cost_per_1000_requests(records: Iterable[RequestRecord], price_input: Decimal | None,
                           price_output: Decimal | None) -> CostFigure:
    """USD per 1,000 requests: the mean measured cost of the succeeded streams that reported
    their usage (prompt and completion tokens), times 1,000. Prices are USD per million tokens.
    """
    if price_input is None or price_output is None:
        return CostFigure(None, "no prices given (--price-input and --price-output, USD per "
                                "million tokens)")
    priced = [r for r in records if r.failure is None and r.completion_tokens is not None]
    if not priced:
        return CostFigure(None, "no successful stream reported its token usage, so cost "
                                "cannot be attributed per request")
    million = Decimal(1_000_000)
    total = Decimal(0)
    for r in priced:
        total += (Decimal(r.prompt_tokens or 0) * price_input
                  + Decimal(r.completion_tokens or 0) * price_output) / million
    per_1000 = total / Decimal(len(priced)) * Decimal(1000)
    return CostFigure(per_1000, None, streams_priced=len(priced))
