"""Scanner CPU per request with short and long prompts. Not a test: run it by hand.

    .venv/bin/python tests/scans/grader/bench_workload.py [--level 64] [--requests 256]
        [--input-tokens 8000] [--repeats 3]

Starts `tokvera target --ttft-ms 200 --itl-ms 20 --tokens 64 --tokenize` in its own process, then
scans it from a child process per run (so CPU is the scanner's alone): once with the built-in
prompts (today's short ones) and once with --input-tokens N, and prints the measured level's
scanner CPU per request (``levels[-1].cpu_s / requests``), medians of the runs, and their ratio.
Traffic goes to 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys

from tests.helpers.processes import ROOT


def _child(url: str, level: int, requests: int, input_tokens: int) -> None:
    sys.path.insert(0, str(ROOT))
    from scans.grader import ScanPlan, run_scan
    from scans.grader.workload import Workload

    plan = ScanPlan(base_url=url, model="bench", levels=(1, level), requests=(1, requests),
                    max_tokens=64, timeout_s=120, use_nvidia_smi=False,
                    workload=Workload(input_tokens=input_tokens or None))
    measurement = run_scan(plan)
    lv = measurement.levels[-1]
    print(json.dumps({"cpu_per_request_ms": lv.cpu_s * 1000.0 / len(lv.requests),
                      "failed": lv.failed_by_class, "client_bound": lv.client_bound,
                      "prompt_tokens": [r.prompt_tokens for r in lv.requests[:1]],
                      "loop_lag_p99_ms": lv.loop_lag_p99_ms}))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--level", type=int, default=64)
    parser.add_argument("--requests", type=int, default=256)
    parser.add_argument("--input-tokens", type=int, default=8000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--child", nargs=4)
    args = parser.parse_args()
    if args.child:
        url, level, requests, tokens = args.child
        _child(url, int(level), int(requests), int(tokens))
        return
    target = subprocess.Popen(
        [sys.executable, "-m", "tokvera_site.cli", "target", "--port", "0", "--ttft-ms", "200",
         "--itl-ms", "20", "--tokens", "64", "--tokenize"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert target.stdout is not None
    match = re.search(r"http://127\.0\.0\.1:\d+/v1", target.stdout.readline())
    if not match:
        target.kill()
        raise SystemExit("the target did not start")
    url = match.group(0)
    results: dict[int, list[dict]] = {0: [], args.input_tokens: []}
    try:
        for _ in range(args.repeats):
            for tokens in results:
                done = subprocess.run(
                    [sys.executable, __file__, "--child", url, str(args.level),
                     str(args.requests), str(tokens)], cwd=ROOT, capture_output=True,
                    text=True, timeout=900, env={**os.environ, "PYTHONPATH": str(ROOT)})
                if done.returncode:
                    raise SystemExit(done.stderr[-2000:])
                result = json.loads(done.stdout.strip().splitlines()[-1])
                results[tokens].append(result)
                print(f"  input {tokens or 'built-in'}: {result}", flush=True)
    finally:
        target.terminate()
        target.wait(10)
    short = statistics.median(r["cpu_per_request_ms"] for r in results[0])
    long = statistics.median(r["cpu_per_request_ms"] for r in results[args.input_tokens])
    print(f"scanner CPU per request at concurrency {args.level}: built-in prompts {short:.3f} ms, "
          f"{args.input_tokens}-token prompts {long:.3f} ms, ratio {long / short:.2f} "
          "(goal <= 1.5)")


if __name__ == "__main__":
    main()
