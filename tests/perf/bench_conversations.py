"""Conversation benchmark: the scanner's CPU per request for 4-turn conversations at 64
sessions in flight, against a single-turn scan of the same prompt and reply lengths. Not a
test: run it by hand.

    .venv/bin/python tests/perf/bench_conversations.py [--requests 1024] [--turns 4]
        [--concurrency 64] [--tokens 64]

Starts `tokvera target` in its own process (its CPU is not the scanner's), then runs both
scans in this process and reads each level's ``cpu_s`` (``time.process_time`` while the level
ran) divided by its requests. A conversation's later turns resend the history, so each of its
bodies is encoded whole (a single-turn body is spliced from a cached template) and each reply's
text is kept: the goal is within 1.5x of the single-turn figure. Prints one JSON object: both
figures, their ratio, whether the goal is met, and whether either level was client-bound (the
scanner's own event loop lagged past the runner's threshold, so the client was the limit).

Traffic goes to 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from scans.grader import ScanPlan, run_scan  # noqa: E402
from scans.grader.workload import Workload  # noqa: E402

GOAL = 1.5


def _level(base_url: str, workload: Workload, args: argparse.Namespace) -> dict:
    plan = ScanPlan(base_url=base_url, model="tokvera-target", levels=(1, args.concurrency),
                    requests=(args.turns, args.requests), timeout_s=60.0, max_tokens=args.tokens,
                    workload=workload)
    level = run_scan(plan).levels[-1]  # the first level (1) only starts the plan
    return {"requests": len(level.requests), "succeeded": len(level.succeeded),
            "cpu_ms_per_request": round(level.cpu_s * 1000 / len(level.requests), 4),
            "duration_s": round(level.duration_s, 3), "client_bound": level.client_bound,
            "loop_lag_p99_ms": round(level.loop_lag_p99_ms or 0.0, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1024)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=64, help="reply tokens")
    args = parser.parse_args()
    target = subprocess.Popen(
        [sys.executable, "-m", "tokvera_site.cli", "target", "--port", "0", "--ttft-ms", "50",
         "--itl-ms", "10", "--tokens", str(args.tokens)],
        stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert target.stdout is not None
        match = re.search(r"http://127\.0\.0\.1:\d+/v1", target.stdout.readline())
        assert match, "the target did not start"
        url = match.group(0)
        single = _level(url, Workload(), args)
        conversation = _level(url, Workload(turns=args.turns), args)
    finally:
        target.terminate()
        target.wait(10)
    ratio = conversation["cpu_ms_per_request"] / single["cpu_ms_per_request"]
    print(json.dumps({
        "turns": args.turns, "concurrency": args.concurrency,
        "single_turn": single, "conversation": conversation,
        "cpu_ratio": round(ratio, 3), "goal": GOAL, "within_goal": ratio <= GOAL,
        "client_was_the_limit": single["client_bound"] or conversation["client_bound"],
    }, indent=2))


if __name__ == "__main__":
    main()
