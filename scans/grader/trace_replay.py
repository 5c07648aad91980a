"""Replaying a trace (``--trace FILE``, read by trace_file.py): each request's prompt built
to its length in the server's tokens with the trace's shared blocks as shared text, sent at the
trace's own times (over ``--trace-speed``), open-loop. Measured, never graded.

**Prompts.** A request's text is its blocks, then its own part::

    [SSSSSSSSSS-block-HHHHHHHHHHHH] filler ...   one block per hash id, BLOCK_TOKENS tokens
    [SSSSSSSSSS-RRRRRR] Read the notes ... filler  the nonce, the instruction, filler to length

A block's text depends only on the scan's nonce and its hash id, so within a scan every
request naming a hash id carries the same text for it (a prefix cache can serve it), and no
block is cached from an earlier scan. The last block the prompt reaches is cut short (its first
words: still a prefix of the whole block); the request's own part follows, its nonce first, so
no two requests share more than their blocks.

**Lengths in the server's tokens.** Before any load, the server counts (by its ``/tokenize`` or
by probes, sizing.py's sizer): the fixed part (chat template, nonce and instruction), a block's
marker, and filler at a few lengths (a fit of tokens to filler words and characters, as an input
spread is sized). A full block is then sized to ``BLOCK_TOKENS`` and counted exactly; each
request's filler comes from the fit. Whether the lengths held is the server's own word:
report.json compares each reply's ``usage.prompt_tokens`` with the trace's ``input_length``.
Reply lengths: ``max_tokens`` the trace's ``output_length``, with ``ignore_eos`` and
``min_tokens`` where the server accepts them (probed first, as for ``--output-tokens``).

**Sent** at the replay's start plus the trace time over the speed, whether or not earlier
replies are done, at most ``--max-connections`` in flight (later ones wait, and the wait counts
in the latency from schedule): the rate levels' loop (``ScanLoad.run_scheduled``), timed and
flagged client-bound as they are (openloop.py).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .apis import request_body, shape_fields
from .figures import percentile, percentiles, rounded
from .load_bodies import ASK, filler, filler_chars, nonce_text
from .measurement import LevelResult, RequestRecord
from .openai_chat import encode_body, user_message
from .openloop import (
    SEND_LAG_THRESHOLD_MS,
    e2e_from_schedule_ms,
    rate_held,
    send_lag_ms,
    ttft_from_schedule_ms,
)
from .sizing import (
    OUTPUT_PROBE_TOKENS,
    _context_from_models,
    _fit_lengths,
    _output_length,
    _Sizer,
    initial_workload,
    tolerance,
)
from .trace_file import BLOCK_TOKENS, TraceReplay
from .workload import Workload, WorkloadError

if TYPE_CHECKING:
    from .load import ScanLoad

__all__ = ["TRACE_NONCE_BASE", "TraceBodies", "prepare_trace", "run_trace", "trace_figures"]

#: A replayed request's nonce number is this plus its place in the trace, apart from the
#: levels' (which count from 0).
TRACE_NONCE_BASE = 800_000
#: Filler lengths (words) counted to fit tokens = a + b·words + c·characters.
FIT_WORDS = (0, 37, 150, 600)
#: The hash id whose block the sizing counts (any: every block has the same length).
_SIZING_BLOCK = 0


def block_text(scan_nonce: int, hash_id: int, words: int) -> str:
    """The text of hash id `hash_id`'s block in this scan, its first `words` filler words."""
    return f"[{scan_nonce:010d}-block-{hash_id:012d}]{filler(words)}\n"


@dataclass
class _Lengths:
    """What the server's counts say of the prompt's parts (tokens)."""

    fixed: int                 # chat template, nonce and instruction, no filler
    marker: int = 0            # a block with no filler word
    block_words: int = 0       # filler words of a full block
    block_tokens: int = 0      # a full block, counted
    fit: tuple[float, float, float] | None = None
    per_word: float = 1.0      # fallback when the fit cannot be made

    def filler_tokens(self, words: int) -> float:
        if self.fit is None:
            return self.per_word * words
        _, b, c = self.fit
        return b * words + c * filler_chars(words)

    def words_for(self, tokens: float, most: int | None = None) -> int:
        """The filler words whose tokens come closest to `tokens` (at most `most`)."""
        if tokens <= 0:
            return 0
        per_word = self.per_word
        if self.fit is not None:  # the fit's tokens per word of average length
            _, b, c = self.fit
            per_word = b + c * filler_chars(360) / 360 if b + c > 0 else per_word
        guess = max(0, round(tokens / max(per_word, 1e-3)))
        low, high = max(0, guess - 12), guess + 12
        best = min(range(low, high + 1), key=lambda k: (abs(self.filler_tokens(k) - tokens), k))
        return best if most is None else min(best, most)


@dataclass
class TraceBodies:
    """The replay's request bodies: ``body(i)`` is the trace's i-th request's. Built once
    the server has been asked (``prepare_trace``)."""

    spec: TraceReplay
    model: str
    scan_nonce: int
    lengths: _Lengths
    api: str = "chat"
    params: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)
    facts: dict = field(default_factory=dict)

    def content(self, i: int, scan_nonce: int | None = None) -> str:
        """The i-th request's prompt text; with another `scan_nonce`, the same length in text
        no request of the load shares (what the sizing counts)."""
        request = self.spec.trace.requests[i]
        lengths = self.lengths
        nonce_of_scan = self.scan_nonce if scan_nonce is None else scan_nonce
        budget = request.input_tokens - lengths.fixed
        parts = []
        for hash_id in request.hash_ids:
            if budget >= lengths.block_tokens:
                parts.append(block_text(nonce_of_scan, hash_id, lengths.block_words))
                budget -= lengths.block_tokens
                continue
            if budget > lengths.marker:  # the last block the prompt reaches, cut short
                words = lengths.words_for(budget - lengths.marker, lengths.block_words)
                parts.append(block_text(nonce_of_scan, hash_id, words))
                budget -= lengths.marker + round(lengths.filler_tokens(words))
            break
        nonce = nonce_text(nonce_of_scan, TRACE_NONCE_BASE + i)
        return f"{''.join(parts)}{nonce} {ASK}{filler(lengths.words_for(budget))}"

    def body(self, i: int) -> bytes:
        max_tokens = self.spec.trace.requests[i].output_tokens
        body = request_body(self.api, self.model, user_message(self.content(i)), max_tokens)
        body.update({k: (max_tokens if k == "min_tokens" else v) for k, v in self.params.items()})
        body.update(shape_fields(self.api, self.extra))
        return encode_body(body)


async def prepare_trace(scan: ScanLoad) -> TraceBodies:
    """Ask the server what the replay needs (reply-length parameters, its context, how it
    counts the prompt's parts); WorkloadError (one line) before any load otherwise."""
    plan = scan.plan
    spec = plan.trace
    assert spec is not None
    nonce = scan.workload.scan_nonce
    probe = initial_workload(Workload(output_tokens=OUTPUT_PROBE_TOKENS), OUTPUT_PROBE_TOKENS,
                             scan_nonce=nonce, api=plan.api)
    params = await _output_length(probe, scan.bodies, scan.client, scan.url, scan.timeout,
                                  scan.parser_class)
    sizer = _Sizer(plan.base_url, plan.model, scan.client, scan.timeout, scan.bodies, scan.url)
    # The sizing's text has its own nonce: counted by probes it lands in the prefix cache,
    # where no request of the load may find it.
    sizing_nonce = (nonce + 1) % 10**10
    tail = f"{nonce_text(sizing_nonce, TRACE_NONCE_BASE)} {ASK}"
    await sizer.detect(user_message(tail))
    limit = sizer.max_model_len or await _context_from_models(
        scan.client, plan.base_url, plan.model, min(scan.timeout, 10.0))
    _check_context(spec, limit)
    lengths = await _measure(sizer, sizing_nonce, tail,
                             any(r.hash_ids for r in spec.trace.requests))
    bodies = TraceBodies(spec, plan.model, nonce, lengths, plan.api, params=params,
                         extra=plan.workload.agent_body())
    longest = max(range(len(spec.trace.requests)),
                  key=lambda i: spec.trace.requests[i].input_tokens)
    counted = await sizer.count(user_message(bodies.content(longest, sizing_nonce)))
    bodies.facts = {
        "sizing": sizer.method or "probe",
        "sizing_detail": sizer.detail,
        "sizing_requests": sizer.requests + probe.sizing_requests + 1,
        "fixed_tokens": lengths.fixed,
        "block_tokens": lengths.block_tokens or None,
        "max_model_len": limit,
        "check": {"line": spec.trace.requests[longest].line,
                  "asked": spec.trace.requests[longest].input_tokens, "counted": counted},
        "output_length": {"enforced": probe.enforced, "sent": list(probe.sent),
                          "note": probe.output_note.replace(
                              f"{probe.sent[0]} {OUTPUT_PROBE_TOKENS}",
                              f"{probe.sent[0]} output_length")},
    }
    return bodies


def _check_context(spec: TraceReplay, limit: int | None) -> None:
    if limit is None:
        return
    for request in spec.trace.requests:
        if request.input_tokens + request.output_tokens > limit:
            raise WorkloadError(f"trace {spec.trace.name}, line {request.line}: input_length "
                                f"{request.input_tokens:,} plus output_length "
                                f"{request.output_tokens:,} exceed the model's context of "
                                f"{limit:,} tokens")


async def _measure(sizer: _Sizer, nonce: int, tail: str, blocks: bool) -> _Lengths:
    """The server's counts of the prompt's parts: the fixed part, filler at ``FIT_WORDS``
    lengths (fitted), a block's marker and a full block sized to ``BLOCK_TOKENS``."""
    points = [(words, await sizer.count(user_message(tail + filler(words))))
              for words in FIT_WORDS]
    fixed = points[0][1]
    lengths = _Lengths(fixed)
    lengths.fit = _fit_lengths([(k, t - fixed) for k, t in points])
    lengths.per_word = max(1e-3, (points[-1][1] - fixed) / FIT_WORDS[-1])
    if not blocks:
        return lengths

    async def block(words: int) -> int:
        return (await sizer.count(user_message(block_text(nonce, _SIZING_BLOCK, words) + tail))
                - fixed)

    lengths.marker = await block(0)
    words = lengths.words_for(BLOCK_TOKENS - lengths.marker)
    counted = await block(words)
    tried = {words: counted}
    for _ in range(4):  # a step or two from the fit's guess to the closest length
        step = 1 if counted < BLOCK_TOKENS else -1
        if counted == BLOCK_TOKENS or words + step < 0 or words + step in tried:
            break
        nearer = await block(words + step)
        tried[words + step] = nearer
        if abs(nearer - BLOCK_TOKENS) >= abs(counted - BLOCK_TOKENS):
            break
        words, counted = words + step, nearer
    if abs(counted - BLOCK_TOKENS) > tolerance(BLOCK_TOKENS):
        raise WorkloadError(f"trace blocks could not be sized: a block came to {counted} tokens "
                            f"for {BLOCK_TOKENS} asked; the scan stops before the load")
    lengths.block_words, lengths.block_tokens = words, counted
    return lengths


async def run_trace(scan: ScanLoad, bodies: TraceBodies,
                    progress: Callable[[int, int, RequestRecord | None], None] | None = None
                    ) -> LevelResult:
    """Send every request of the trace at its time over the speed (``run_scheduled``), at most
    ``--max-connections`` in flight; `progress(completed, total, record)` as they end."""
    spec = bodies.spec
    total = len(spec.trace.requests)
    records: list[RequestRecord] = [scan.record_type(level=0, index=i) for i in range(total)]
    level = LevelResult(0, records, loop_lag_threshold_ms=scan.lag_threshold_ms,
                        arrival="trace", max_connections=spec.max_connections)
    if progress:
        progress(0, total, None)

    def done(completed: int, record: RequestRecord) -> None:
        if progress:
            progress(completed, total, record)

    await scan.run_scheduled(level, spec.offsets(), bodies.body, done)
    return level


# -- what the replay measured ---------------------------------------------------------------------

def _shared_block_share(spec: TraceReplay) -> float | None:
    """Of the trace's input tokens, the share in blocks that more than one request names."""
    named = Counter(h for r in spec.trace.requests for h in set(r.hash_ids))
    total = sum(r.input_tokens for r in spec.trace.requests)
    shared = 0
    for r in spec.trace.requests:
        left = r.input_tokens
        for h in r.hash_ids:
            size = min(BLOCK_TOKENS, left)
            if named[h] > 1:
                shared += size
            left -= size
    return rounded(shared / total, 4) if total else None


def _input_error(level: LevelResult, spec: TraceReplay) -> dict:
    """How far the server's count of each prompt (usage.prompt_tokens) was from the trace's
    input_length."""
    off = [abs(r.prompt_tokens - spec.trace.requests[r.index].input_tokens)
           for r in level.succeeded if r.prompt_tokens is not None]
    within = sum(1 for r in level.succeeded if r.prompt_tokens is not None
                 and abs(r.prompt_tokens - (asked := spec.trace.requests[r.index].input_tokens))
                 <= tolerance(asked))
    return {"counted": len(off), "within_tolerance": within,
            "p50": rounded(percentile(off, 50)), "max": max(off) if off else None}


def trace_figures(level: LevelResult, spec: TraceReplay, facts: dict[str, Any]) -> dict:
    """The trace-only part of report.json's ``trace_replay`` (the level's usual figures are
    beside it): the schedule held, offered and achieved rates, latencies from schedule, the
    shared blocks and how the lengths held."""
    trace = spec.trace
    span = spec.span_s
    written = [r.body_written_at for r in level.requests if r.body_written_at is not None]
    written_span = (max(written) - level.started_at) if written else 0.0
    lags = [t for r in level.requests if (t := send_lag_ms(r)) is not None]
    waits = [r.connection_wait_s * 1000.0 for r in level.requests if r.connection_wait_s is not None]
    held = rate_held(level)
    succeeded = level.succeeded
    return {
        "file": trace.name,
        "sha256": trace.sha256,
        "shape": trace.shape,
        "speed": spec.speed,
        "span_s": rounded(span),
        "offered_rate_per_s": rounded(len(level.requests) / span) if span > 0 else None,
        "achieved_rate_per_s": rounded(len(written) / written_span) if written_span > 0 else None,
        "ttft_from_schedule_ms": percentiles(
            [t for r in succeeded if (t := ttft_from_schedule_ms(r)) is not None]),
        "e2e_from_schedule_ms": percentiles(
            [t for r in succeeded if (t := e2e_from_schedule_ms(r)) is not None]),
        "send_lag_ms": ({"p50": rounded(percentile(lags, 50)), "p95": rounded(percentile(lags, 95)),
                         "p99": rounded(percentile(lags, 99)), "max": rounded(max(lags)),
                         "threshold": SEND_LAG_THRESHOLD_MS} if lags else None),
        "schedule_held": held,
        "waited_for_connection": sum(1 for r in level.requests if r.waited_for_connection),
        "connection_wait_ms": ({"p50": rounded(percentile(waits, 50)),
                                "p95": rounded(percentile(waits, 95)), "max": rounded(max(waits))}
                               if any(waits) else None),
        "max_connections": level.max_connections,
        "peak_in_flight": level.concurrency,
        "shared_block_share": _shared_block_share(spec),
        "input_tokens_asked": sum(r.input_tokens for r in trace.requests),
        "output_tokens_asked": sum(r.output_tokens for r in trace.requests),
        "input_length_error": _input_error(level, spec),
        "preparation": facts,
        "client_bound": level.client_bound or not held,
    }
