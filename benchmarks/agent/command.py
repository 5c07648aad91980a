"""`tokvera host-agent`: its flags, read into an AgentConfig, and the agent run until a signal."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys

from benchmarks.agent.config import AgentConfig
from benchmarks.agent.loop import Agent
from scans.grader.cli import UsageError


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()[:100]
    return ""


def _ram_mb() -> int | None:
    with contextlib.suppress(ValueError, OSError, AttributeError):
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1024 * 1024)
    return None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--coordinator", required=True, metavar="URL",
                        help="the Tokvera site, e.g. http://127.0.0.1:8000")
    parser.add_argument("--token-env", required=True, metavar="VAR",
                        help="environment variable that holds the host token (tkh_…)")
    parser.add_argument("--upstream", required=True, metavar="URL",
                        help="OpenAI-compatible server, e.g. http://127.0.0.1:8080/v1")
    parser.add_argument("--model", required=True, action="append", metavar="ID",
                        help="catalog id served (repeat for several)")
    parser.add_argument("--upstream-model", default=None, metavar="NAME",
                        help="model name to send upstream (default: the catalog id)")
    parser.add_argument("--slots", type=int, default=1, help="jobs run at once (default 1)")
    parser.add_argument("--heartbeat-s", type=float, default=15.0, help=argparse.SUPPRESS)
    parser.add_argument("--poll-s", type=float, default=1.0,
                        help="seconds between lease calls when the coordinator does not hold "
                             "them (default 1)")
    parser.add_argument("--lease-wait-s", type=float, default=25.0,
                        help="how long the coordinator holds a lease call for a job "
                             "(0 to 30, default 25)")
    parser.add_argument("--job-timeout-s", type=float, default=270.0,
                        help="give up on an upstream stream after this long (default 270, below the "
                             "coordinator's 300 s run deadline)")
    parser.add_argument("--gpu-model", default="", help="GPU model, for the hardware inventory")
    parser.add_argument("--vram-mb", type=int, default=None, help="GPU memory in MiB")
    parser.add_argument("--max-jobs", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--quiet", action="store_true", help="log only problems")


def config_from_args(args: argparse.Namespace) -> AgentConfig:
    token = os.environ.get(args.token_env, "").strip()
    if not token:
        raise UsageError(f"environment variable {args.token_env} holds no host token")
    if not token.startswith("tkh_"):
        raise UsageError(f"{args.token_env} does not hold a host token (tkh_…)")
    for name in ("coordinator", "upstream"):
        url = getattr(args, name)
        if not url.startswith(("http://", "https://")):
            raise UsageError(f"--{name} {url!r}: expected an http:// or https:// URL")
    if not 1 <= args.slots <= 64:
        raise UsageError("--slots must be between 1 and 64")
    if not 0 <= args.lease_wait_s <= 30:
        raise UsageError("--lease-wait-s must be between 0 and 30")
    if args.poll_s <= 0 or args.heartbeat_s <= 0 or args.job_timeout_s <= 0:
        raise UsageError("--poll-s, --heartbeat-s and --job-timeout-s must be positive")
    hardware: dict[str, str | int] = {"cpu_model": _cpu_model()}
    if args.gpu_model:
        hardware["gpu_model"] = args.gpu_model[:100]
    if args.vram_mb is not None:
        hardware["vram_mb"] = args.vram_mb
    ram = _ram_mb()
    if ram is not None:
        hardware["ram_mb"] = ram
    return AgentConfig(
        coordinator=args.coordinator, token=token, upstream=args.upstream,
        models=tuple(dict.fromkeys(args.model)), upstream_model=args.upstream_model,
        slots=args.slots, heartbeat_s=args.heartbeat_s, poll_s=args.poll_s,
        lease_wait_s=args.lease_wait_s,
        job_timeout_s=args.job_timeout_s, hardware=hardware, max_jobs=args.max_jobs,
    )


def run(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    quiet = getattr(args, "quiet", False)

    def log(line: str) -> None:
        if quiet and (": completed" in line):
            return
        sys.stderr.write(f"host-agent: {line}\n")
        sys.stderr.flush()

    async def main() -> int:
        agent = Agent(config, log=log)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, agent.stop)
        log(f"serving {', '.join(config.models)} from {config.upstream} for {config.coordinator} "
            f"({config.slots} slot{'s' if config.slots != 1 else ''})")
        return await agent.run()

    return asyncio.run(main())
