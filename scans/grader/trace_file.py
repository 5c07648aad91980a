"""A trace to replay (``--trace FILE``): reading and checking the file, and what the plan
keeps of it. No I/O but the file: sizing the prompts against the server and sending them is
trace_replay.py's.

Two shapes of JSONL, told apart by the keys of the first request:

* **Mooncake** (kvcache-ai/Mooncake's traces): ``{"timestamp": ms, "input_length": tokens,
  "output_length": tokens, "hash_ids": [int, ...]}``. Each hash id names a block of
  ``BLOCK_TOKENS`` prompt tokens; requests whose ``hash_ids`` start alike share that prompt
  prefix (what a prefix cache serves). ``hash_ids`` may be absent (no shared block).
* **BurstGPT** (its CSV's columns as JSONL): ``{"Timestamp": s, "Request tokens": n,
  "Response tokens": m, ...}``; the other columns (Model, Log Type...) are not read.

Everything is checked before anything is sent, each refusal one line naming the file and the
line: bad JSON, a missing, negative or non-integer length, a reply length of 0 (BurstGPT marks
failed requests so), timestamps that go back (a trace is replayed in its own order, never
sorted: a shuffled file is more likely a broken one), more blocks than the prompt holds, an
empty trace.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "BLOCK_TOKENS",
    "MAX_TRACE_REQUESTS",
    "MAX_TRACE_SPAN_S",
    "TRACE_SHAPES",
    "Trace",
    "TraceError",
    "TraceReplay",
    "TraceRequest",
    "load_trace",
]

#: The prompt tokens one Mooncake hash id stands for.
BLOCK_TOKENS = 512
TRACE_SHAPES = ("mooncake", "burstgpt")
MAX_TRACE_BYTES = 256 * 1024 * 1024
MAX_TRACE_REQUESTS = 100_000
#: A replay lasts at most this long (trace time over the speed): a typo guard.
MAX_TRACE_SPAN_S = 24 * 3600.0
MAX_SPEED = 1000.0
#: The largest hash id: its block's text carries it in twelve fixed-width digits.
MAX_HASH_ID = 10**12 - 1
MAX_INPUT_TOKENS = 10_000_000
MAX_OUTPUT_TOKENS = 1_000_000

#: shape -> (timestamp key, seconds per timestamp unit, input key, output key, blocks key)
_KEYS: dict[str, tuple[str, float, str, str, str | None]] = {
    "mooncake": ("timestamp", 0.001, "input_length", "output_length", "hash_ids"),
    "burstgpt": ("Timestamp", 1.0, "Request tokens", "Response tokens", None),
}


class TraceError(ValueError):
    """A --trace file (or option) that cannot be replayed; one line meant for the user."""


@dataclass(frozen=True)
class TraceRequest:
    """One request of a trace: its line in the file, when it is due (seconds of trace time
    after the first request), its lengths in tokens and the blocks its prompt starts with."""

    line: int
    at_s: float
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class Trace:
    path: str
    shape: str
    sha256: str
    #: Requests in the file (before --trace-limit and --trace-max-s).
    lines: int
    requests: tuple[TraceRequest, ...] = field(repr=False)

    @property
    def name(self) -> str:
        return Path(self.path).name


def _shape(obj: dict, where: str) -> str:
    for shape, (time_key, _, input_key, output_key, _) in _KEYS.items():
        if time_key in obj and (input_key in obj or output_key in obj):
            return shape
    raise TraceError(f"{where}: neither a Mooncake line ({{\"timestamp\", \"input_length\", "
                     "\"output_length\", \"hash_ids\"}) nor a BurstGPT one "
                     "({\"Timestamp\", \"Request tokens\", \"Response tokens\"})")


def _tokens(obj: dict, key: str, where: str, least: int, most: int) -> int:
    value = obj.get(key)
    if value is None:
        raise TraceError(f"{where}: \"{key}\" is missing")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if type(value) is not int:
        raise TraceError(f"{where}: \"{key}\" must be a whole number of tokens, not {value!r}")
    if not least <= value <= most:
        hint = (" (BurstGPT marks a failed request with 0 response tokens: drop those lines)"
                if least == 1 and value == 0 else "")
        raise TraceError(f"{where}: \"{key}\" {value} must be from {least} to {most:,}{hint}")
    return value


def _time(obj: dict, key: str, where: str) -> float:
    value = obj.get(key)
    if value is None:
        raise TraceError(f"{where}: \"{key}\" is missing")
    if type(value) not in (int, float) or not math.isfinite(value) or value < 0:
        raise TraceError(f"{where}: \"{key}\" must be a number of at least 0, not {value!r}")
    return float(value)


def _hash_ids(obj: dict, key: str, where: str, input_tokens: int) -> tuple[int, ...]:
    value = obj.get(key, [])
    if not isinstance(value, list) or any(
            type(h) is not int or not 0 <= h <= MAX_HASH_ID for h in value):
        raise TraceError(f"{where}: \"{key}\" must be a list of whole numbers from 0 to "
                         f"{MAX_HASH_ID:,}")
    holds = -(-input_tokens // BLOCK_TOKENS)
    if len(value) > holds:
        raise TraceError(f"{where}: {len(value)} hash_ids name blocks of {BLOCK_TOKENS} tokens, "
                         f"more than input_length {input_tokens:,} holds ({holds})")
    return tuple(value)


def _request(obj: Any, shape: str, where: str, first_s: float | None) -> TraceRequest:
    if not isinstance(obj, dict):
        raise TraceError(f"{where}: expected a JSON object")
    if _shape(obj, where) != shape:
        raise TraceError(f"{where}: a {_shape(obj, where)} line in a {shape} trace")
    time_key, unit, input_key, output_key, blocks_key = _KEYS[shape]
    at = _time(obj, time_key, where) * unit
    input_tokens = _tokens(obj, input_key, where, 1, MAX_INPUT_TOKENS)
    output_tokens = _tokens(obj, output_key, where, 1, MAX_OUTPUT_TOKENS)
    hash_ids = _hash_ids(obj, blocks_key, where, input_tokens) if blocks_key else ()
    return TraceRequest(0, at - (first_s if first_s is not None else at),
                        input_tokens, output_tokens, hash_ids)


def _read(path: Path) -> bytes:
    try:
        if path.stat().st_size > MAX_TRACE_BYTES:
            raise TraceError(f"trace {path} is larger than {MAX_TRACE_BYTES // 2**20} MiB")
        return path.read_bytes()
    except OSError as exc:
        raise TraceError(f"cannot read trace {path}: {exc.strerror or exc}") from None


def load_trace(path: str | Path, *, limit: int | None = None,
               max_s: float | None = None) -> Trace:
    """Read and check a JSONL trace: its first `limit` requests, and of them those due within
    `max_s` seconds of trace time (lines past those are not read). TraceError otherwise."""
    if limit is not None and not 1 <= limit <= MAX_TRACE_REQUESTS:
        raise TraceError(f"--trace-limit {limit}: expected 1 to {MAX_TRACE_REQUESTS:,} requests")
    if max_s is not None and not (math.isfinite(max_s) and max_s > 0):
        raise TraceError(f"--trace-max-s {max_s:g}: expected a positive number of seconds")
    path = Path(path)
    raw = _read(path)
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        bad_line = raw[:exc.start].count(b"\n") + 1
        raise TraceError(f"trace {path}, line {bad_line}: not UTF-8 text") from None
    shape: str | None = None
    first_s: float | None = None
    requests: list[TraceRequest] = []
    lines = 0
    past_end = False  # --trace-limit or --trace-max-s reached: later lines are counted only
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        lines += 1
        if past_end or (limit is not None and len(requests) >= limit):
            continue
        where = f"trace {path}, line {number}"
        try:
            obj = json.loads(line)
        except ValueError:
            raise TraceError(f"{where}: not JSON (a trace is JSONL, one request per line)") from None
        if shape is None:
            shape = _shape(obj, where) if isinstance(obj, dict) else "mooncake"
        request = _request(obj, shape, where, first_s)
        if first_s is None:
            first_s = _first_time(obj, shape)
        if requests and request.at_s < requests[-1].at_s:
            raise TraceError(f"{where}: its timestamp goes back before line "
                             f"{requests[-1].line}'s (a trace is replayed in its own order, "
                             "never sorted)")
        if max_s is not None and request.at_s > max_s:
            past_end = True
            continue
        if len(requests) >= MAX_TRACE_REQUESTS:
            raise TraceError(f"trace {path}: more than {MAX_TRACE_REQUESTS:,} requests; "
                             "replay part of it with --trace-limit or --trace-max-s")
        requests.append(TraceRequest(number, request.at_s, request.input_tokens,
                                     request.output_tokens, request.hash_ids))
    if not requests or shape is None:
        raise TraceError(f"trace {path} has no requests"
                         + (f" within --trace-max-s {max_s:g}" if lines and max_s else ""))
    return Trace(str(path), shape, hashlib.sha256(raw).hexdigest(), lines, tuple(requests))


def _first_time(obj: dict, shape: str) -> float:
    time_key, unit, *_ = _KEYS[shape]
    return float(obj[time_key]) * unit


@dataclass(frozen=True)
class TraceReplay:
    """The plan's trace replay: the trace, how much faster than its own clock it is sent, and
    at most how many requests may be in flight (None: as many as the trace asks)."""

    trace: Trace
    speed: float = 1.0
    max_connections: int | None = None
    limit: int | None = None
    max_s: float | None = None

    def offsets(self) -> list[float]:
        """When each request is due, in seconds after the replay starts."""
        return [r.at_s / self.speed for r in self.trace.requests]

    @property
    def span_s(self) -> float:
        return self.trace.requests[-1].at_s / self.speed

    def validate(self) -> TraceReplay:
        if not (isinstance(self.speed, int | float) and math.isfinite(self.speed)
                and 0 < self.speed <= MAX_SPEED):
            raise TraceError(f"--trace-speed {self.speed:g}: expected a number above 0 and at "
                             f"most {MAX_SPEED:g} (2 replays twice as fast)")
        if self.max_connections is not None and not 1 <= self.max_connections <= 100_000:
            raise TraceError("--max-connections must be from 1 to 100000")
        if self.span_s > MAX_TRACE_SPAN_S:
            raise TraceError(f"trace {self.trace.path}: the replay would last "
                             f"{self.span_s / 3600:,.1f} h, over "
                             f"{MAX_TRACE_SPAN_S / 3600:g} h; raise --trace-speed or cut it "
                             "with --trace-max-s")
        return self

    def public_dict(self) -> dict:
        """report.json's ``plan.trace``."""
        trace = self.trace
        return {"file": trace.name, "sha256": trace.sha256, "shape": trace.shape,
                "lines": trace.lines, "requests": len(trace.requests), "speed": self.speed,
                "limit": self.limit, "max_s": self.max_s,
                "span_s": round(self.span_s, 3), "max_connections": self.max_connections}
