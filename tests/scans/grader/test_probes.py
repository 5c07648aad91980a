"""/metrics probe, GPU utilization from a DCGM exporter, and the connect guard."""

from __future__ import annotations

import pytest

from scans.grader import run_scan
from scans.grader.check_values import check_values
from scans.grader.demo_server import TargetConfig, running_target
from tests.helpers.servers import (
    END_CHUNKS,
    SSE_HEAD,
    good_stream,
    http_chunk,
    plan_for,
    raw_server,
    read_request,
)


def _server_with_metrics(status: int, body: bytes, content_type: bytes = b"text/plain"):
    async def handler(reader, writer):
        while True:
            head, _ = await read_request(reader)
            if b"/metrics" in head.split(b"\r\n")[0]:
                writer.write(b"HTTP/1.1 %d X\r\ncontent-type: %s\r\ncontent-length: %d\r\n\r\n"
                             % (status, content_type, len(body)) + body)
            else:
                writer.write(SSE_HEAD + http_chunk(good_stream(2)) + END_CHUNKS)
            await writer.drain()

    return handler


PROMETHEUS = b"# HELP up Is it up\n# TYPE up gauge\nup 1\n"
HTML = b"<!DOCTYPE html><html><body><h1>Metrics</h1></body></html>\n"


@pytest.mark.parametrize(("status", "body", "present"), [
    (200, PROMETHEUS, True),
    (200, HTML, False),
    (404, PROMETHEUS, False),
    (200, b"# only a comment\n", False),
])
def test_metrics_endpoint_is_present_only_for_prometheus_text_with_a_sample(status, body,
                                                                             present):
    with raw_server(_server_with_metrics(status, body)) as port:
        m = run_scan(plan_for(port, requests=1))
    assert m.metrics.present is present, m.metrics.detail
    assert m.metrics.url == f"http://127.0.0.1:{port}/metrics"


def test_metrics_endpoint_is_absent_when_nothing_listens():
    with raw_server(_server_with_metrics(200, PROMETHEUS)) as port:
        pass  # closed again: nothing listens on that port now
    m = run_scan(plan_for(port, requests=1, timeout_s=2))
    assert m.metrics.present is False
    assert m.levels[0].failed_by_class == {"transport_error": 1}


def test_gpu_utilization_is_read_from_a_dcgm_exporter_during_the_load():
    dcgm = (b'# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n'
            b'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a"} 75\n'
            b'DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-b"} 40\n')
    with raw_server(_server_with_metrics(200, dcgm)) as exporter, \
            running_target(TargetConfig(ttft_ms=5, itl_ms=1, tokens=8)) as (host, port):
        plan = plan_for(port, requests=2, dcgm_url=f"http://127.0.0.1:{exporter}/metrics")
        m = run_scan(plan)
    assert m.gpu.source == "dcgm"
    assert m.gpu.peak == 0.75
    assert {s["gpu"] for s in m.gpu.samples} == {"0", "1"}
    assert check_values(m)["gpu_utilization_at_peak"].value == 0.75


def test_without_a_gpu_source_the_gpu_check_is_reported_with_its_reason():
    with running_target(TargetConfig(ttft_ms=5, itl_ms=1, tokens=8)) as (host, port):
        m = run_scan(plan_for(port, requests=1, use_nvidia_smi=False))
    value = check_values(m)["gpu_utilization_at_peak"]
    assert value.value is None and value.reason.startswith("no GPU source")


def test_the_connect_guard_sees_every_connection_and_can_refuse_it():
    calls = []

    def refuse_everything(host, port, ip):
        calls.append((host, port, ip))
        raise PermissionError("private address")

    with running_target(TargetConfig(ttft_ms=5, itl_ms=1, tokens=8)) as (host, port):
        plan = plan_for(port, requests=2)
        m = run_scan(plan, connect_guard=refuse_everything)
    # The preflight's probe was refused, so the scan stopped before any load.
    assert m.preflight.stopped and m.levels[0].failed_by_class == {"transport_error": 1}
    assert "refused" in m.levels[0].failure_examples["transport_error"]
    assert m.metrics.present is False
    assert calls and all(c == ("127.0.0.1", port, "127.0.0.1") for c in calls)


def test_the_connect_guard_receives_the_resolved_address_of_a_name():
    calls = []

    def allow(host, port, ip):
        calls.append((host, ip))

    with running_target(TargetConfig(ttft_ms=5, itl_ms=1, tokens=8)) as (host, port):
        from scans.grader import ScanPlan

        plan = ScanPlan(base_url=f"http://localhost:{port}/v1", model="m", levels=(1,),
                        requests=2, max_tokens=8)
        m = run_scan(plan, connect_guard=allow)
    assert calls and {c[0] for c in calls} == {"localhost"}
    assert {c[1] for c in calls} <= {"127.0.0.1", "::1"}
    # either loopback family may answer first; what matters is that the guard saw the address
    assert m.levels[0].requests
