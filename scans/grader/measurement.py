"""What a scan measured: per-request named timestamps and what is derived from them.

Every request keeps its own timeline (``time.perf_counter()`` seconds, comparable within one
scan) and every summary -- TTFT, chunk gaps, rates -- is derived from those timestamps, so the
raw data and the percentiles always agree.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from decimal import Decimal

from scans.grader.figures import percentile, rounded

from .stream import StreamTally

__all__ = [
    "FAILURE_CLASSES",
    "GRADED_TTFT",
    "CostFigure",
    "GpuReading",
    "LevelResult",
    "Measurement",
    "MetricsProbe",
    "ModelsListing",
    "Preflight",
    "AgentRecord",
    "RequestRecord",
    "end_to_end_ms",
]

#: Failure classes besides ``http_status_<code>``.
FAILURE_CLASSES = (
    "timeout",            # the request did not finish within --timeout
    "transport_error",    # no response: connection refused/reset, DNS, TLS, refused by the guard
    "incomplete_stream",  # the body ended (or broke) before [DONE] or a finish_reason
    "stream_error",       # an `error` object in the stream, or an event too large to buffer
    "not_sse",            # a 2xx whose body is not an SSE stream (e.g. a JSON error body)
    "empty_reply",        # a clean stream without any output (content, reasoning, tool call)
)

#: Which time the graded ``ttft_*`` checks read: the first output token of any kind, thinking
#: included (not the first answer token). See DECISIONS.md, "Reasoning models".
GRADED_TTFT = "first_output_token"


@dataclass(slots=True)
class RequestRecord(StreamTally):
    """One request's named timestamps and outcome, and what its stream carried (the
    ``StreamTally`` fields, read by ``stream.StreamParser``).

    Timestamps (seconds, ``perf_counter``; None when the moment never came):
    ``scheduled_at`` a worker took the request (in a rate level: the moment it was due);
    ``dispatched_at`` (rate levels) the grader took it up; ``sent_at`` it was handed to httpx;
    ``body_written_at`` the last byte of the request body was written (httpcore trace);
    ``headers_at`` the response headers were read; ``first_output_at`` / ``last_output_at`` the
    first / last chunk with output of any kind (thinking or answer) arrived;
    ``first_answer_at`` the first answer chunk (content, refusal or tool call) arrived;
    ``done_at`` the stream said it was done (``[DONE]``); ``ended_at`` the request was over,
    whatever the outcome.
    """

    level: int
    index: int
    scheduled_at: float = 0.0
    sent_at: float | None = None
    body_written_at: float | None = None
    headers_at: float | None = None
    ended_at: float | None = None
    status_code: int | None = None
    failure: str | None = None
    error: str | None = None
    reused_connection: bool | None = None
    retried: bool = False
    dispatched_at: float | None = None
    #: Rate levels under --max-connections: the request found every connection busy, and how
    #: long it waited for one (seconds).
    waited_for_connection: bool = False
    connection_wait_s: float | None = None

    @property
    def succeeded(self) -> bool:
        return self.failure is None

    def _since_written_ms(self, moment: float | None) -> float | None:
        if moment is None or self.body_written_at is None:
            return None
        return (moment - self.body_written_at) * 1000.0

    @property
    def ttft_ms(self) -> float | None:
        """Time to first token as graded (``GRADED_TTFT``): to the first output of any kind."""
        return self._since_written_ms(self.first_output_at)

    @property
    def time_to_first_answer_ms(self) -> float | None:
        return self._since_written_ms(self.first_answer_at)

    def timeline_ms(self, origin: float) -> dict:
        """The named timestamps in ms from `origin` (for report.json's raw data)."""
        def rel(t: float | None) -> float | None:
            return None if t is None else rounded((t - origin) * 1000.0)

        return {
            "index": self.index,
            "outcome": self.failure or "succeeded",
            "status_code": self.status_code,
            "scheduled_at_ms": rel(self.scheduled_at),
            **({"dispatched_at_ms": rel(self.dispatched_at)}
               if self.dispatched_at is not None else {}),
            "sent_at_ms": rel(self.sent_at),
            "body_written_at_ms": rel(self.body_written_at),
            "headers_at_ms": rel(self.headers_at),
            "first_output_at_ms": rel(self.first_output_at),
            "first_answer_at_ms": rel(self.first_answer_at),
            "last_output_at_ms": rel(self.last_output_at),
            "done_at_ms": rel(self.done_at),
            "ended_at_ms": rel(self.ended_at),
            "output_chunks": len(self.output_times),
            "thinking_chunks": self.thinking_chunks,
            "answer_chunks": self.answer_chunks,
            "completion_tokens": self.completion_tokens,
            "reasoning_tokens": self.reasoning_tokens,
            "prompt_tokens": self.prompt_tokens,
            "cached_tokens": self.cached_tokens,
            "finish_reason": self.finish_reason,
            "retried": self.retried,
            "error": self.error,
        }


@dataclass(slots=True)
class AgentRecord(RequestRecord):
    """A request of an agent-shaped load (conversations, tools, a schema): a ``RequestRecord``
    and what its shape adds. Kept apart so that the per-request timelines a site proves stay
    those of ``RequestRecord``."""

    #: A conversation's request: its session (from 0, within the level) and turn (from 1).
    session: int | None = None
    turn: int | None = None
    #: Sent with tools: the tool calls the reply made (0 before a reply is read), and of them
    #: how many had JSON arguments, named a declared tool, and were valid for its schema.
    tool_calls: int | None = None
    tool_calls_parsed: int = 0
    tool_calls_named: int = 0
    tool_calls_valid: int = 0
    #: Sent with a response_format schema: "unanswered" until a reply is read, then "valid",
    #: "invalid" (JSON, not valid for the schema) or "unparsed" (not JSON).
    structured: str | None = None
    #: A scan over several URLs (--replica): which of the plan's URLs served it (0: the base
    #: URL). Here, not in RequestRecord: no check reads it, and a pushed report need not carry it.
    url_index: int = 0


def served_by(record: RequestRecord) -> int:
    """The index of the plan's URL that served `record` (0, the base URL, unless replicas)."""
    return record.url_index if isinstance(record, AgentRecord) else 0


def end_to_end_ms(record: RequestRecord) -> float | None:
    """From the request body written to the moment the stream said it was done ([DONE], else
    the end of the response): what a caller waits for a whole answer."""
    end = record.done_at if record.done_at is not None else record.ended_at
    if end is None or record.body_written_at is None:
        return None
    return (end - record.body_written_at) * 1000.0


@dataclass
class LevelResult:
    """One concurrency level: its requests, and how the grader itself fared (loop lag)."""

    concurrency: int
    requests: list[RequestRecord]
    started_at: float = 0.0   # perf_counter
    finished_at: float = 0.0
    loop_lag_ms: array = field(default_factory=lambda: array("d"))
    loop_lag_threshold_ms: float = 0.0
    #: CPU seconds this process spent while the level ran (``time.process_time``; in the CLI
    #: that is the grader alone), to show how hard the client itself worked.
    cpu_s: float = 0.0
    #: An open-loop rate level (scans.grader.openloop): its requests per second, arrival and
    #: connection limit; ``concurrency`` is then the peak number of requests in flight.
    rate_per_s: float | None = None
    arrival: str | None = None
    max_connections: int | None = None
    #: The --warmup requests sent just before this level: never counted in any figure, kept
    #: only so that requests.jsonl lists every request the scan sent.
    warmup: list[RequestRecord] = field(default_factory=list)
    #: With --stop-on-saturation: {reason, after_requests} when the level stopped before
    #: sending all its requests (scans.grader.saturation); its requests are those sent.
    stopped_early: dict | None = None

    @property
    def succeeded(self) -> list[RequestRecord]:
        return [r for r in self.requests if r.failure is None]

    @property
    def failed_by_class(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for r in self.requests:
            if r.failure is not None:
                counts[r.failure] = counts.get(r.failure, 0) + 1
        return dict(sorted(counts.items()))

    @property
    def failure_examples(self) -> dict[str, str]:
        """The first error message seen for each failure class."""
        examples: dict[str, str] = {}
        for r in self.requests:
            if r.failure is not None and r.failure not in examples:
                examples[r.failure] = r.error or r.failure
        return dict(sorted(examples.items()))

    def ttft_samples_ms(self) -> list[float]:
        """Time to first token as graded (``GRADED_TTFT``), one per successful request."""
        return [t for r in self.succeeded if (t := r.ttft_ms) is not None]

    def first_answer_samples_ms(self) -> list[float]:
        return [t for r in self.succeeded if (t := r.time_to_first_answer_ms) is not None]

    def thinking_samples_ms(self) -> list[float]:
        """First answer minus first output, for the successful requests that thought."""
        return [t for r in self.succeeded if (t := r.thinking_ms()) is not None]

    def gap_samples_ms(self) -> list[float]:
        gaps: list[float] = []
        for r in self.succeeded:
            gaps.extend(r.gaps_ms())
        return gaps

    def rates(self, basis: str) -> list[float]:
        return [v for r in self.succeeded if (v := r.rate(basis)) is not None]

    @property
    def loop_lag_p99_ms(self) -> float | None:
        return percentile(self.loop_lag_ms, 99)

    @property
    def loop_lag_max_ms(self) -> float | None:
        return max(self.loop_lag_ms) if self.loop_lag_ms else None

    @property
    def client_bound(self) -> bool:
        """The grader's own event loop fell behind: its p99 lag exceeded the threshold."""
        p99 = self.loop_lag_p99_ms
        return p99 is not None and p99 > self.loop_lag_threshold_ms

    @property
    def duration_s(self) -> float:
        return max(0.0, self.finished_at - self.started_at)

    @property
    def output_chunks(self) -> int:
        return sum(len(r.output_times) for r in self.requests)

    def output_shares(self) -> dict:
        """How the successful streams' output split into thinking and answer: by chunks, and
        by tokens where every stream that thought stated its reasoning tokens."""
        streams = self.succeeded
        thinking = sum(r.thinking_chunks for r in streams)
        outputs = sum(len(r.output_times) for r in streams)
        thought = [r for r in streams if r.thought]
        token_share = None
        if thought and all(r.reasoning_tokens is not None for r in thought):
            reasoning = sum(r.reasoning_tokens or 0 for r in thought)
            completion = sum(r.completion_tokens or 0 for r in streams)
            token_share = reasoning / completion if completion else None
        return {
            "thinking_chunks": thinking,
            "answer_chunks": sum(r.answer_chunks for r in streams),
            "thinking_share_of_chunks": thinking / outputs if outputs else None,
            "thinking_share_of_tokens": token_share,
            "streams_that_thought": len(thought),
            "stopped_while_thinking": sum(1 for r in streams if r.stopped_while_thinking),
        }


@dataclass
class MetricsProbe:
    """``GET {origin}/metrics``: present only for a 200 that parses as Prometheus text with at
    least one sample."""

    url: str
    present: bool
    detail: str
    samples: int = 0


@dataclass
class GpuReading:
    """GPU utilization sampled while the load ran; ``peak`` is a share (0..1), highest across
    GPUs and samples; None with ``reason`` when there was no source or no sample."""

    source: str | None
    peak: float | None
    reason: str | None
    samples: list[dict] = field(default_factory=list)


@dataclass
class CostFigure:
    """USD per 1,000 requests from measured usage and the given prices, or None and why."""

    usd_per_1000_requests: Decimal | None
    reason: str | None
    streams_priced: int = 0


@dataclass
class ModelsListing:
    """What ``GET {base}/models`` answered, kept compact whatever the server sent."""

    url: str
    answered: bool = False
    status_code: int | None = None
    ids: list[str] = field(default_factory=list)   # the first few (preflight.MODELS_IDS_KEPT)
    ids_total: int = 0
    model_listed: bool | None = None               # None: no usable list
    detail: str = ""
    #: The requested model's entry, compact (``server_identity.entry_facts``): what the server
    #: states of it (owned_by, root, max_model_len...). Read for report.json's ``server``.
    entry: dict | None = None

    def as_dict(self) -> dict:
        return {"url": self.url, "answered": self.answered, "status_code": self.status_code,
                "ids": self.ids, "ids_total": self.ids_total,
                "model_listed": self.model_listed, "detail": self.detail}


@dataclass
class Preflight:
    """The preflight's outcome: the /models answer, the probe and whether the scan stops."""

    models: ModelsListing
    probe: RequestRecord
    stopped: bool
    cause: str | None         # one sentence; None when the probe succeeded
    kind: str | None          # connection_refused, dns, tls, timeout, auth, model_not_found, ...

    @property
    def server_answered(self) -> bool:
        """The probe got response headers (so the origin is worth probing further)."""
        return self.probe.headers_at is not None

    def without_load(self, lag_threshold_ms: float) -> tuple[list[LevelResult], GpuReading]:
        """The levels and GPU reading of a scan that ran no load: a stopped scan counts its
        probe as its one request at concurrency 1 (so the scoring rules see the failure);
        a passed preflight (``--preflight-only``) has no level."""
        levels = []
        if self.stopped:
            level = LevelResult(1, [self.probe], loop_lag_threshold_ms=lag_threshold_ms)
            level.started_at = self.probe.scheduled_at
            level.finished_at = self.probe.ended_at or self.probe.scheduled_at
            levels.append(level)
        why = "the preflight stopped the scan" if self.stopped else "preflight only"
        return levels, GpuReading(None, None, f"no load was run: {why}", [])

    def metrics_not_probed(self, origin: str) -> MetricsProbe:
        why = ("the server did not answer the probe" if not self.server_answered
               else "preflight only")
        return MetricsProbe(f"{origin}/metrics", False, f"not probed: {why}")

    def as_dict(self) -> dict:
        probe = self.probe
        return {
            "models": self.models.as_dict(),
            "probe": {"outcome": probe.failure or "succeeded", "status_code": probe.status_code,
                      "ttft_ms": rounded(probe.ttft_ms),
                      "error": probe.error},
            "stopped": self.stopped,
            "cause": self.cause,
            "kind": self.kind,
        }


@dataclass
class Measurement:
    """Everything one scan measured. No check values, no grade: see scans.grader.check_values."""

    base_url: str
    model: str
    started_at: str   # ISO 8601 UTC
    finished_at: str
    levels: list[LevelResult]
    metrics: MetricsProbe
    gpu: GpuReading
    cost: CostFigure
    loop_lag_threshold_ms: float
    origin_time: float   # perf_counter at the start: timelines are relative to it
    scanner: dict = field(default_factory=dict)
    #: The /models answer and the probe request; None in measurements built without one.
    preflight: Preflight | None = None
    #: What the load sent and how its prompts were sized (``sizing.PreparedWorkload``'s
    #: ``public_dict``; report.json's ``plan.workload``); empty when not recorded.
    workload: dict = field(default_factory=dict)
    #: The levels the capacity search added, after the plan's: never graded, so
    #: they are kept apart from ``levels`` (which check_values and the proof read).
    searched_levels: list[LevelResult] = field(default_factory=list)
    #: The search stopped at its bound (levels or requests), not at the boundary it sought.
    search_exhausted: bool = False
    #: Open-loop rate levels (--rate), after everything else: measured, never graded.
    rate_levels: list[LevelResult] = field(default_factory=list)
    #: What the server says of itself (``server_identity.server_identity``; report.json's
    #: ``server``); None in measurements built without it.
    server: dict | None = None
    #: The preflight's probe of each replica URL (the base URL's is ``preflight.probe``).
    replica_probes: list[AgentRecord] = field(default_factory=list)
    #: Levels not run because an earlier one stopped early: {phase, concurrency, rate_per_s,
    #: reason}.
    skipped_levels: list[dict] = field(default_factory=list)
    #: The trace replayed (--trace), last of all: measured, never graded; its requests in the
    #: trace's order. ``trace`` says how its prompts were prepared (``preparation``) and the
    #: trace line of each request (``lines``, index for index).
    trace_level: LevelResult | None = None
    trace: dict | None = None
    #: The API the load spoke (``plan.api``): check_values says why an embeddings scan has no
    #: time to first token.
    api: str = "chat"

    @property
    def all_requests(self) -> list[RequestRecord]:
        return [r for level in self.levels for r in level.requests]

    def level(self, concurrency: int) -> LevelResult | None:
        for level in self.levels:
            if level.concurrency == concurrency:
                return level
        return None


#: A suggested budget is rounded up to a multiple of this.
BUDGET_STEP = 256


def budget_hint(measurement: Measurement, max_tokens: int) -> dict | None:
    """When the scan saw thinking: how many requests ran out of `max_tokens` before answering,
    and a budget that would have fitted. None when no stream thought. A hint only: the scan
    never changes what was asked.

    The suggestion: 1.25 x the largest output (tokens when stated, else chunks) of a stream
    that thought and then answered, and at least twice the budget used when some ran out;
    four times the budget when no thinking stream answered at all (its length is unknown)."""
    streams = [r for r in measurement.all_requests if r.succeeded and r.thought]
    if not streams:
        return None
    stopped = [r for r in streams if r.stopped_while_thinking]
    answered = [r.output_units for r in streams if r.first_answer_at is not None]
    wanted: float
    if not answered:
        wanted = 4 * max_tokens
    else:
        wanted = max(1.25 * max(answered), 2 * max_tokens if stopped else 0)
    suggested = max(max_tokens, -(-int(wanted) // BUDGET_STEP) * BUDGET_STEP)
    return {
        "streams_that_thought": len(streams),
        "stopped_while_thinking": len(stopped),
        "max_tokens": max_tokens,
        "suggested_max_tokens": suggested if stopped else None,
        "note": (f"{len(stopped)} of {len(streams)} requests that thought ran out of "
                 f"max_tokens {max_tokens} before answering; try --max-tokens {suggested}"
                 if stopped else
                 f"every request that thought answered within max_tokens {max_tokens}"),
    }
