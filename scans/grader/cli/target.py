"""`tokvera target --port P`: the reference OpenAI-compatible streaming server."""

from __future__ import annotations

import argparse
import asyncio
import sys

from scans.grader.cli import UsageError
from scans.grader.demo_server import DEMO_TARGET, REASONING_FIELDS, TargetConfig, TargetServer


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=int, required=True, help="TCP port (0: any free port)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--demo", action="store_true",
                        help="the run command's demo target: --ttft-ms 180 --itl-ms 15 "
                             "--jitter-ms 40 --tokens 48 --slots 8 (not combined with them)")
    parser.add_argument("--ttft-ms", type=float, default=200.0,
                        help="time to first token, ms (default 200)")
    parser.add_argument("--itl-ms", type=float, default=20.0,
                        help="time between tokens, ms (default 20)")
    parser.add_argument("--tokens", type=int, default=64,
                        help="tokens per reply, capped by the request's max_tokens (default 64)")
    parser.add_argument("--jitter-ms", type=float, default=0.0,
                        help="uniform random delay in [0, J] ms added to every token's due time")
    parser.add_argument("--error-rate", type=float, default=0.0,
                        help="share of requests answered with HTTP 500 (default 0)")
    parser.add_argument("--no-usage", action="store_true", help="never report token usage")
    parser.add_argument("--no-metrics", action="store_true", help="no /metrics endpoint")
    parser.add_argument("--role-chunk", action="store_true",
                        help="send a role-only first chunk before the content")
    parser.add_argument("--slots", "--max-concurrency", dest="max_concurrency", type=int,
                        default=None, metavar="N",
                        help="N decode slots: at most N streams generate at once, the others "
                             "queue for a slot and their time to first token includes the "
                             "wait (default: unlimited)")
    parser.add_argument("--seed", type=int, default=None, help="seed for jitter and errors")
    parser.add_argument("--reasoning-tokens", type=int, default=0, metavar="N",
                        help="stream N thinking tokens before the answer, like a reasoning "
                             "model; they count against max_tokens (default 0)")
    parser.add_argument("--reasoning-field", choices=REASONING_FIELDS,
                        default="reasoning_content",
                        help="the delta field the thinking goes in: reasoning_content (vLLM, "
                             "SGLang, llama-server; the default) or reasoning (OpenRouter)")
    parser.add_argument("--prefill-ms-per-1k", type=float, default=0.0, metavar="MS",
                        help="prefill time per 1,000 prompt tokens not served from the prefix "
                             "cache, added to the time to first token (default 0)")
    parser.add_argument("--no-prefix-cache", action="store_true",
                        help="no automatic prefix cache (by default blocks of 16 tokens are "
                             "cached and usage reports prompt_tokens_details.cached_tokens)")
    parser.add_argument("--tokenize", action="store_true",
                        help="serve POST /tokenize as vLLM does (messages or prompt in, count "
                             "and max_model_len out)")
    parser.add_argument("--max-model-len", type=int, default=None, metavar="N",
                        help="context length: listed in /models and /tokenize; a prompt plus "
                             "max_tokens over it is refused with 400")
    parser.add_argument("--strict-params", action="store_true",
                        help="refuse request parameters OpenAI's API does not know "
                             "(ignore_eos, min_tokens...) with 400, as OpenAI does")
    parser.add_argument("--bad-tool-share", type=float, default=0.0, metavar="SHARE",
                        help="make this share of tool-call replies bad, alternately arguments "
                             "that never close and an undeclared tool's name (default 0)")
    parser.add_argument("--bad-json-share", type=float, default=0.0, metavar="SHARE",
                        help="make this share of response_format json_schema replies bad, "
                             "alternately cut short and of the wrong type (default 0)")


#: The options --demo sets (parser destination → the demo's TargetConfig field).
_DEMO_OPTIONS = {"ttft_ms": "ttft_ms", "itl_ms": "itl_ms", "jitter_ms": "jitter_ms",
                 "tokens": "tokens", "max_concurrency": "max_concurrency"}


def _apply_demo(args: argparse.Namespace) -> None:
    """--demo: the demo target's shape, refused beside an option that would change it."""
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    defaults = vars(parser.parse_args(["--port", "0"]))
    given = [name for name in _DEMO_OPTIONS if getattr(args, name) != defaults[name]]
    if given:
        flags = ", ".join("--" + name.replace("_", "-") for name in given)
        raise UsageError(f"--demo sets the demo target's shape; drop {flags} or --demo")
    for dest, field in _DEMO_OPTIONS.items():
        setattr(args, dest, getattr(DEMO_TARGET, field))


def _config(args: argparse.Namespace) -> TargetConfig:
    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port {args.port}: expected 0..65535")
    if min(args.ttft_ms, args.itl_ms, args.jitter_ms) < 0 or min(args.tokens,
                                                                 args.reasoning_tokens) < 0:
        raise UsageError("times, --tokens and --reasoning-tokens must not be negative")
    for flag, share in (("--error-rate", args.error_rate),
                        ("--bad-tool-share", args.bad_tool_share),
                        ("--bad-json-share", args.bad_json_share)):
        if not 0 <= share <= 1:
            raise UsageError(f"{flag} must be between 0 and 1")
    if args.max_concurrency is not None and args.max_concurrency < 1:
        raise UsageError("--slots must be at least 1")
    if args.prefill_ms_per_1k < 0:
        raise UsageError("--prefill-ms-per-1k must not be negative")
    if args.max_model_len is not None and args.max_model_len < 1:
        raise UsageError("--max-model-len must be at least 1")
    return TargetConfig(ttft_ms=args.ttft_ms, itl_ms=args.itl_ms, tokens=args.tokens,
                        jitter_ms=args.jitter_ms, error_rate=args.error_rate,
                        usage=not args.no_usage, metrics=not args.no_metrics,
                        role_chunk=args.role_chunk, max_concurrency=args.max_concurrency,
                        seed=args.seed, reasoning_tokens=args.reasoning_tokens,
                        reasoning_field=args.reasoning_field,
                        prefill_ms_per_1k_tokens=args.prefill_ms_per_1k,
                        prefix_cache=not args.no_prefix_cache, tokenize=args.tokenize,
                        max_model_len=args.max_model_len, strict_params=args.strict_params,
                        bad_tool_share=args.bad_tool_share, bad_json_share=args.bad_json_share)


async def _serve(config: TargetConfig, host: str, port: int) -> None:
    server = TargetServer(config)
    try:
        bound_host, bound_port = await server.start(host, port)
    except OSError as exc:
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    sys.stdout.write(f"tokvera target listening on http://{shown}:{bound_port}/v1\n")
    sys.stdout.flush()
    await server.serve_forever()


def run(args: argparse.Namespace) -> int:
    if args.demo:
        _apply_demo(args)
    config = _config(args)
    try:
        import uvloop

        factory = uvloop.new_event_loop
    except ImportError:  # pragma: no cover - optional speed-up
        factory = None
    with asyncio.Runner(loop_factory=factory) as runner:
        try:
            runner.run(_serve(config, args.host, args.port))
        except KeyboardInterrupt:  # Ctrl-C is how the server is meant to stop: one line
            sys.stderr.write("tokvera target: stopped\n")
            return 0
    return 0
