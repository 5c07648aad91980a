"""Factories for endpoints, reports and scans (no fixture files)."""

from __future__ import annotations

import functools
import json

from accounts import encryption
from scans.grader import scoring
from scans.grader.scoring import CheckValue
from scans.models import Endpoint, NotificationChannel, Scan, ScanStatus, ScanTrigger
from scans.running import worker as scan_worker

GOOD_VALUES = {
    "ttft_p95_at_concurrency_1": CheckValue(210.0),
    "ttft_p99_load_ratio": CheckValue(1.4),
    "inter_chunk_p95_at_concurrency_1": CheckValue(22.0),
    "error_rate": CheckValue(0.0),
    "error_rate_at_peak": CheckValue(0.0),
    "generation_rate_load_ratio": CheckValue(0.9, basis="tokens"),
    "usage_reported_share": CheckValue(1.0),
    "metrics_endpoint": CheckValue(True),
    "repeat_prompt_share": CheckValue(None, "no --prompts sample"),
    "gpu_utilization_at_peak": CheckValue(None, "no GPU utilization source"),
}


def make_report(values=None, base_url="http://127.0.0.1:8080/v1", model="tiny") -> dict:
    graded = scoring.grade(GOOD_VALUES if values is None else values)
    return {
        "tool_version": "0.1.0",
        "target": {"base_url": base_url, "model": model},
        "started_at": "2026-11-29T10:00:00Z",
        "finished_at": "2026-11-29T10:01:00Z",
        "plan": {"levels": [1, 4], "requests_per_level": [20, 40], "max_tokens": 64},
        "levels": [
            {"concurrency": 1, "requests": 20, "succeeded": 20, "failed": {},
             "ttft_ms": {"p50": 201.0, "p95": 210.0, "p99": 212.0},
             "chunk_gap_ms": {"p50": 20.0, "p95": 21.0, "p99": 25.0},
             "generation_rate": {"median": 49.5, "basis": "tokens"}},
            {"concurrency": 4, "requests": 40, "succeeded": 40, "failed": {},
             "ttft_ms": {"p50": 230.0, "p95": 280.0, "p99": 297.0},
             "chunk_gap_ms": {"p50": 20.0, "p95": 24.0, "p99": 30.0},
             "generation_rate": {"median": 45.0, "basis": "tokens"}},
        ],
        "checks": graded.checks,
        "measurements": {"cost_per_1000_requests": None, "cost_reason": "no prices given"},
        "score": graded.score,
    }


def make_endpoint(team, **fields) -> Endpoint:
    """An endpoint of `team`. Its alerts go to every channel of the team (a new team has its
    email channel); `webhook_url` (with `webhook_secret`) adds a webhook channel for them, as
    the endpoint's own webhook did before channels; `alert_email=False` leaves mail out."""
    webhook_url = fields.pop("webhook_url", "")
    webhook_secret = fields.pop("webhook_secret", "")
    alert_email = fields.pop("alert_email", True)
    defaults = {
        "name": "llama on box", "base_url": "http://127.0.0.1:8080/v1", "model": "tiny",
        "levels": [1, 4], "requests_per_level": 4, "max_tokens": 16, "timeout_s": 10.0,
        "interval_minutes": 60,
    }
    endpoint = Endpoint.dangerously_unscoped.create(team=team, **{**defaults, **fields})
    if webhook_url or not alert_email:
        picked = ([make_channel(team, "webhook", url=webhook_url, secret=webhook_secret)]
                  if webhook_url else [])
        if alert_email:
            picked += list(NotificationChannel.dangerously_unscoped.filter(team=team, kind="email"))
        endpoint.all_channels = False
        endpoint.save(update_fields=["all_channels"])
        endpoint.channels.set(picked)
    return endpoint


def make_channel(team, kind: str, name: str | None = None, url: str = "", secret: str = "",
                 enabled: bool = True) -> NotificationChannel:
    """A channel of `team`, stored as the channels page stores one (its URL checked when the
    test allows the address, e.g. loopback)."""
    from scans.notify.channels import kinds, service

    channel = NotificationChannel(team=team)
    name = name or f"{kind} {NotificationChannel.dangerously_unscoped.filter(team=team).count() + 1}"
    config = {"url": url, "secret": secret} if kind == "webhook" else ({"url": url} if url else {})
    channel.kind, channel.name, channel.enabled = kind, name, enabled
    channel.config_encrypted = encryption.encrypt(json.dumps(config)) if config else ""
    channel.destination = kinds.destination(kind, url)
    return service.save(channel)


def make_scan(endpoint, report=None, status=ScanStatus.SUCCEEDED, trigger=ScanTrigger.SCHEDULE,
              error_reason="") -> Scan:
    scan = Scan.dangerously_unscoped.create(endpoint=endpoint, trigger=trigger)
    if status == ScanStatus.SUCCEEDED:
        return scan_worker.store_report(scan, report or make_report(model=endpoint.model))
    if status == ScanStatus.ERRORED:
        scan_worker.fail(scan.pk, error_reason or "refused to connect to 10.0.0.1")
        scan.refresh_from_db()
    return scan


@functools.cache
def _measured_report_json(model: str, error_rate: float, variant: int) -> str:
    from scans.grader import ScanPlan, run_scan
    from scans.grader.demo_server import TargetConfig, running_target
    from scans.grader.report import report_from_measurement

    config = TargetConfig(ttft_ms=5, itl_ms=1, tokens=8, error_rate=error_rate, seed=variant)
    with running_target(config) as (host, port):
        plan = ScanPlan(base_url=f"http://{host}:{port}/v1", model=model, levels=(1, 2),
                        requests=3, max_tokens=16)
        return json.dumps(report_from_measurement(plan, run_scan(plan)))


def measured_report(model: str = "tiny", *, error_rate: float = 0.0, variant: int = 0) -> dict:
    """A report.json as `tokvera scan` writes it, from a real scan of `tokvera target` on
    loopback: what a site can prove from its samples (one scan per argument set and run).
    `variant` makes another scan, so another report."""
    return json.loads(_measured_report_json(model, error_rate, variant))


def send_alert_now(endpoint, scan, kind: str, detail: str):
    """Record one alert as scans.notify.alerts.after_scan does and try each of its deliveries here
    (no worker); returns the event."""
    from scans.notify import alerts
    from scans.notify.channels import delivery

    event = delivery.record(endpoint, scan, kind, alerts.payload(endpoint, scan, kind, detail))
    for row in event.deliveries.all():
        delivery.attempt(row.pk)
    return event
