"""Open-loop benchmark: the highest rate the scanner holds against a fast loopback
server before it flags the level itself. Not a test: run it by hand.

    .venv/bin/python tests/perf/bench_open_loop.py [--repeats 3] [--seconds 3]
        [--rates 250,500,...] [--arrival poisson]

Starts a raw asyncio (uvloop when installed) server in its own process that answers every chat
request at once with a five-chunk stream and usage, then for each rate runs the scanner in a
child process (`--concurrency 1 --requests 1` plus one rate level of `seconds x rate`
requests) and reads the rate level from report.json's figures: achieved rate, send lag p95,
event-loop lag p99, client_bound. A rate is held when the level is not client-bound (neither a
p95 send lag above 50 ms nor a p99 loop lag above 50 ms) and no request failed. Prints, per
repeat, the highest rate held below the first one flagged, and their median, in requests/s.
GuideLLM's maintainers measured about 1,000 requests/s for theirs.

Traffic goes to 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_RATES = "250,500,750,1000,1250,1500,2000,2500,3000,4000,5000"

SERVER = r"""
import asyncio, json, sys
def ev(obj): return b"data: " + json.dumps(obj).encode() + b"\n\n"
body = b"".join(ev({"choices": [{"index": 0, "delta": {"content": f" w{i}"},
                                  "finish_reason": None}]}) for i in range(5))
body += ev({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
body += ev({"choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 5,
                                      "total_tokens": 15}})
body += b"data: [DONE]\n\n"
reply = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: "
         + str(len(body)).encode() + b"\r\n\r\n" + body)
models = json.dumps({"data": [{"id": "bench"}]}).encode()
models_reply = (b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
                + str(len(models)).encode() + b"\r\n\r\n" + models)
missing = b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n"

async def handle(reader, writer):
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            if length:
                await reader.readexactly(length)
            target = head.split(b" ", 2)[1]
            writer.write(reply if target.endswith(b"/chat/completions") else
                         models_reply if target.endswith(b"/models") else missing)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()

async def main():
    server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=4096)
    print(server.sockets[0].getsockname()[1], flush=True)
    await server.serve_forever()

try:
    import uvloop
    uvloop.run(main())
except ImportError:
    asyncio.run(main())
"""


def _child(url: str, rate: float, requests: int, arrival: str) -> None:
    sys.path.insert(0, str(ROOT))
    from scans.grader import ScanPlan, run_scan
    from scans.grader.openloop import OpenLoop, parse_arrival
    from scans.grader.report import report_from_measurement

    plan = ScanPlan(
        base_url=url,
        model="bench",
        levels=(1,),
        requests=1,
        max_tokens=8,
        timeout_s=30,
        use_nvidia_smi=False,
        open_loop=OpenLoop((rate,), parse_arrival(arrival), requests=requests),
    )
    measurement = run_scan(plan)
    [level] = report_from_measurement(plan, measurement)["rate_levels"]
    print(
        json.dumps(
            {
                key: level.get(key)
                for key in (
                    "rate_per_s",
                    "achieved_rate_per_s",
                    "requests",
                    "succeeded",
                    "failed",
                    "rate_held",
                    "client_bound",
                    "send_lag_ms",
                    "loop_lag_ms",
                    "scanner_cpu_s",
                    "duration_s",
                    "peak_in_flight",
                )
            }
        )
    )


def _start_server() -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-c", SERVER], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    port = proc.stdout.readline().strip()
    if not port.isdigit():
        proc.kill()
        raise SystemExit("the server did not start")
    return proc, f"http://127.0.0.1:{port}/v1"


def _run(url: str, rate: float, requests: int, arrival: str) -> dict:
    done = subprocess.run(
        [sys.executable, __file__, "--child", url, str(rate), str(requests), arrival],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    if done.returncode != 0:
        raise SystemExit(f"scanner child failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _held(result: dict) -> bool:
    return not result["client_bound"] and not result["failed"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rates", default=DEFAULT_RATES)
    parser.add_argument("--arrival", default="poisson")
    parser.add_argument("--child", nargs=4, metavar=("URL", "RATE", "REQUESTS", "ARRIVAL"))
    args = parser.parse_args()
    if args.child:
        url, rate, requests, arrival = args.child
        _child(url, float(rate), int(requests), arrival)
        return

    rates = [float(r) for r in args.rates.split(",")]
    server, url = _start_server()
    print(
        f"server: {url} (instant 5-chunk streams); cores: {os.cpu_count()}; load "
        f"{os.getloadavg()[0]:.1f}; python {sys.version.split()[0]}; arrival {args.arrival}; "
        f"{args.seconds:g} s per rate"
    )
    highest: list[float] = []
    try:
        for repeat in range(args.repeats):
            best = 0.0
            for rate in rates:
                requests = max(20, int(rate * args.seconds))
                started = time.perf_counter()
                result = _run(url, rate, requests, args.arrival)
                lag = result["send_lag_ms"] or {}
                loop = result["loop_lag_ms"] or {}
                print(
                    f"  run {repeat + 1} rate {rate:>7,.0f}/s: achieved "
                    f"{result['achieved_rate_per_s'] or 0:>8,.1f}/s, send lag p95 "
                    f"{lag.get('p95') or 0:>8.1f} ms, loop lag p99 {loop.get('p99') or 0:>6.1f} "
                    f"ms, cpu {result['scanner_cpu_s']:.2f} s, peak in flight "
                    f"{result['peak_in_flight']}, failed {result['failed'] or 0}, "
                    f"{'held' if _held(result) else 'FLAGGED'} "
                    f"({time.perf_counter() - started:.1f} s)",
                    flush=True,
                )
                if not _held(result):
                    break
                best = rate
            highest.append(best)
    finally:
        server.terminate()
        server.wait(10)
    print(
        f"\nhighest rate held before the scanner flags itself, per run: "
        f"{', '.join(f'{h:,.0f}' for h in highest)} requests/s; median "
        f"{statistics.median(highest):,.0f} requests/s"
    )


if __name__ == "__main__":
    main()
