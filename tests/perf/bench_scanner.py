"""Scanner benchmark (issue 3's performance goals). Not a test: run it by hand.

    .venv/bin/python tests/perf/bench_scanner.py [--repeats 3] [--no-uvloop]

Starts `tokvera target --ttft-ms 200 --itl-ms 20 --tokens 64` in its own process, then runs the
scanner in a separate child process per measurement (so CPU time and peak RSS are the
scanner's alone) and prints medians:

* TTFT p50 minus the target's 200 ms, at concurrency 1 and 128 (goals: <= 2 ms and <= 10 ms);
* content chunks per CPU-second of the scanner process during the scan (goal: >= 20,000);
* peak RSS of the scanner process at concurrency 256 (goal: <= 200 MB);
* the scanner's own event-loop lag (p99 of 10 ms oversleeps), for the client_bound threshold.

Traffic goes to 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TARGET_TTFT_MS = 200.0


def _child(url: str, level: int, requests: int, uvloop: bool) -> None:
    sys.path.insert(0, str(ROOT))
    from scans.grader import ScanPlan, run_scan
    from scans.grader.figures import percentile

    plan = ScanPlan(base_url=url, model="bench", levels=tuple(sorted({1, level})) if level > 1
                    else (1,), requests=(1, requests) if level > 1 else (requests,),
                    max_tokens=64, timeout_s=60, use_nvidia_smi=False)
    usage0 = resource.getrusage(resource.RUSAGE_SELF)
    wall0 = time.perf_counter()
    measurement = run_scan(plan, use_uvloop=uvloop)
    wall = time.perf_counter() - wall0
    usage1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (usage1.ru_utime - usage0.ru_utime) + (usage1.ru_stime - usage0.ru_stime)
    lv = measurement.levels[-1]
    chunks = lv.output_chunks  # the measured level's chunks over the CPU it took
    ttft = lv.ttft_samples_ms()
    print(json.dumps({
        "level": level, "requests": requests, "succeeded": len(lv.succeeded),
        "failed": lv.failed_by_class,
        "ttft_p50_ms": percentile(ttft, 50), "ttft_p99_ms": percentile(ttft, 99),
        "chunks": chunks, "cpu_s": cpu, "level_cpu_s": lv.cpu_s, "wall_s": wall,
        "chunks_per_cpu_s": chunks / lv.cpu_s if lv.cpu_s else None,
        "chunks_per_cpu_s_whole_process": (
            sum(level.output_chunks for level in measurement.levels) / cpu if cpu else None),
        "peak_rss_mb": usage1.ru_maxrss / 1024.0,
        "loop_lag_p99_ms": lv.loop_lag_p99_ms, "loop_lag_max_ms": lv.loop_lag_max_ms,
        "client_bound": lv.client_bound, "event_loop": measurement.scanner["event_loop"],
        "json": measurement.scanner["json"],
    }))


def _start_target() -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tokvera_site.cli", "target", "--port", "0", "--ttft-ms",
         str(TARGET_TTFT_MS), "--itl-ms", "20", "--tokens", "64"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    match = re.search(r"http://127\.0\.0\.1:\d+/v1", line)
    if not match:
        proc.kill()
        raise SystemExit(f"target did not start: {line!r} {proc.stderr.read()!r}")
    return proc, match.group(0)


def _run(url: str, level: int, requests: int, uvloop: bool) -> dict:
    cmd = [sys.executable, __file__, "--child", url, str(level), str(requests)]
    if not uvloop:
        cmd.append("--no-uvloop")
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    if done.returncode != 0:
        raise SystemExit(f"scanner child failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-uvloop", action="store_true")
    parser.add_argument("--child", nargs=3, metavar=("URL", "LEVEL", "REQUESTS"))
    args = parser.parse_args()
    if args.child:
        url, level, requests = args.child
        _child(url, int(level), int(requests), not args.no_uvloop)
        return

    target, url = _start_target()
    print(f"target: {url} (ttft 200 ms, itl 20 ms, 64 tokens); cores: {os.cpu_count()}; "
          f"python {sys.version.split()[0]}")
    plan = [("c1", 1, 10), ("c128", 128, 384), ("c256", 256, 512)]
    results: dict[str, list[dict]] = {name: [] for name, _, _ in plan}
    try:
        for repeat in range(args.repeats):
            for name, level, requests in plan:
                result = _run(url, level, requests, not args.no_uvloop)
                results[name].append(result)
                print(f"  run {repeat + 1} {name}: ttft p50 {result['ttft_p50_ms']:.2f} ms, "
                      f"{result['chunks_per_cpu_s']:.0f} chunks/CPU-s, "
                      f"rss {result['peak_rss_mb']:.1f} MB, lag p99 "
                      f"{result['loop_lag_p99_ms']:.2f} ms, failed {result['failed']}",
                      flush=True)
    finally:
        target.terminate()
        target.wait(10)

    def med(name: str, key: str) -> float:
        return statistics.median(r[key] for r in results[name])

    first = results["c1"][0]
    print(f"\nscanner: event loop {first['event_loop']}, json {first['json']}; "
          f"medians of {args.repeats} runs")
    print(f"TTFT p50 - 200 ms at concurrency 1:   {med('c1', 'ttft_p50_ms') - 200:.2f} ms "
          "(goal <= 2)")
    print(f"TTFT p50 - 200 ms at concurrency 128: {med('c128', 'ttft_p50_ms') - 200:.2f} ms "
          "(goal <= 10)")
    print(f"chunks per CPU-second at concurrency 128: {med('c128', 'chunks_per_cpu_s'):,.0f} "
          "(goal >= 20,000)")
    print(f"chunks per CPU-second at concurrency 256: {med('c256', 'chunks_per_cpu_s'):,.0f}")
    print("chunks per CPU-second, whole scanner process (start-up, the concurrency-1 level, "
          f"probe included): c128 {med('c128', 'chunks_per_cpu_s_whole_process'):,.0f}, "
          f"c256 {med('c256', 'chunks_per_cpu_s_whole_process'):,.0f}")
    print(f"peak RSS at concurrency 256: {med('c256', 'peak_rss_mb'):.1f} MB (goal <= 200)")
    for name in ("c1", "c128", "c256"):
        print(f"event-loop lag at {name}: p99 {med(name, 'loop_lag_p99_ms'):.2f} ms, "
              f"max {med(name, 'loop_lag_max_ms'):.2f} ms, client_bound "
              f"{[r['client_bound'] for r in results[name]]}")


if __name__ == "__main__":
    main()
