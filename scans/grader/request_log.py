"""requests.jsonl: one JSON line per request a scan sent, beside report.json.

Every request the scan timed is a line -- the preflight's probe, each level's warm-up, the
plan's levels, the capacity search's levels, the open-loop rate levels and the replayed trace
(each with its line in the trace file) -- read from the
``RequestRecord`` each already keeps (measurement.py), so nothing more is held in memory
while the load runs. A line holds times, token counts (as the server stated them in its
usage), the HTTP status and the failure class; never a prompt, a reply, an error message
(servers echo the prompt in them), a header or the API key. docs/requests.md documents each
field and docs/requests.schema.json is its JSON Schema.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

from scans.grader.figures import rounded
from scans.grader.measurement import (
    AgentRecord,
    LevelResult,
    Measurement,
    RequestRecord,
    end_to_end_ms,
    served_by,
)

__all__ = ["PHASES", "REQUESTS_FILE", "request_lines", "write_requests"]

REQUESTS_FILE = "requests.jsonl"
#: What a request was for, in the order a scan sends them.
PHASES = ("probe", "warmup", "level", "search", "rate", "trace")


def _iso(moment: datetime) -> str:
    return moment.isoformat(timespec="microseconds").replace("+00:00", "Z")


def _line(record: RequestRecord, *, phase: str, index: int, concurrency: int | None,
          rate_per_s: float | None, warmup_for: str | None, origin: float,
          started: datetime, replicas: bool = False) -> dict:
    def offset_ms(moment: float | None) -> float | None:
        return None if moment is None else rounded((moment - origin) * 1000.0)

    # Wall clock from the scan's start plus the monotonic offset: the lines agree with one
    # another even if the system clock is stepped during the scan.
    start = started + timedelta(seconds=record.scheduled_at - origin)
    return {
        "phase": phase,
        "warmup_for": warmup_for,
        "concurrency": concurrency,
        "rate_per_s": rate_per_s,
        "index": index,
        "start_time": _iso(start),
        "start_epoch_s": round(start.timestamp(), 6),
        "start_offset_ms": offset_ms(record.scheduled_at),
        "body_written_offset_ms": offset_ms(record.body_written_at),
        "ttft_ms": rounded(record.ttft_ms),
        "time_to_first_answer_ms": rounded(record.time_to_first_answer_ms),
        "end_offset_ms": offset_ms(record.ended_at),
        "latency_ms": rounded(end_to_end_ms(record)),
        "output_chunks": record.output_chunks,
        "prompt_tokens": record.prompt_tokens,
        "completion_tokens": record.completion_tokens,
        "cached_prompt_tokens": record.cached_tokens,
        "reasoning_tokens": record.reasoning_tokens,
        "status": record.status_code,
        "error_class": record.failure,
        # Only a conversation's requests carry these (older readers never see them).
        **({"session": record.session, "turn": record.turn}
           if isinstance(record, AgentRecord) and record.turn is not None else {}),
        # Only a scan over several URLs says which served it (report.json's plan.urls).
        **({"url": served_by(record)} if replicas else {}),
    }


def request_lines(measurement: Measurement) -> Iterator[dict]:
    """The lines of `measurement`'s requests.jsonl, in the order the scan sent them: the
    probe, then level by level (plan, search, rate, the trace) its warm-up and its requests."""
    origin = measurement.origin_time
    started = datetime.fromisoformat(measurement.started_at).astimezone(UTC)
    preflight = measurement.preflight
    replicas = bool(measurement.replica_probes)
    if preflight is not None:
        # A probe that stopped the scan is also its one level's request: one line for it.
        yield _line(preflight.probe, phase="probe", index=0, concurrency=1, rate_per_s=None,
                    warmup_for=None, origin=origin, started=started, replicas=replicas)
    if preflight is not None and preflight.stopped:
        return
    for probe in measurement.replica_probes:  # one probe per replica URL, index 0 each
        yield _line(probe, phase="probe", index=0, concurrency=1, rate_per_s=None,
                    warmup_for=None, origin=origin, started=started, replicas=True)
    groups: tuple[tuple[str, list[LevelResult]], ...] = (
        ("level", measurement.levels), ("search", measurement.searched_levels),
        ("rate", measurement.rate_levels))
    for phase, levels in groups:
        for level in levels:
            # A rate level's concurrency is only its peak in flight: it is named by its rate.
            concurrency = None if level.rate_per_s is not None else level.concurrency
            sent = [("warmup", number, record) for number, record in enumerate(level.warmup)]
            sent += [(phase, record.index, record) for record in level.requests]
            for kind, index, record in sent:
                yield _line(record, phase=kind, index=index, concurrency=concurrency,
                            rate_per_s=level.rate_per_s,
                            warmup_for=phase if kind == "warmup" else None,
                            origin=origin, started=started, replicas=replicas)
    yield from _trace_lines(measurement, origin, started, replicas)


def _trace_lines(measurement: Measurement, origin: float, started: datetime,
                 replicas: bool) -> Iterator[dict]:
    """The replayed trace's warm-up and requests, each request with its line in the file."""
    level = measurement.trace_level
    if level is None:
        return
    lines = (measurement.trace or {}).get("lines") or []
    for number, record in enumerate(level.warmup):
        yield _line(record, phase="warmup", index=number, concurrency=None, rate_per_s=None,
                    warmup_for="trace", origin=origin, started=started, replicas=replicas)
    for record in level.requests:
        line = _line(record, phase="trace", index=record.index, concurrency=None,
                     rate_per_s=None, warmup_for=None, origin=origin, started=started,
                     replicas=replicas)
        line["trace_line"] = lines[record.index]
        yield line


def write_requests(measurement: Measurement, out_dir: str | os.PathLike) -> Path:
    """Write requests.jsonl into `out_dir` (created if needed), a line at a time."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / REQUESTS_FILE
    with path.open("w", encoding="utf-8") as file:
        for line in request_lines(measurement):
            file.write(json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n")
    return path
