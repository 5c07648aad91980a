"""`make run`'s ready banner (the demo login) is the last thing on screen: it is printed only
once the Celery workers have answered and logged their start-up, not as soon as the web
answers. Runs the run command's own worker, proofs and login lines (Procfile.dev) under honcho,
as `make run` does, with a stand-in web that answers /healthz at once."""

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

from tests.helpers.paths import ROOT
from tests.helpers.servers import healthz, serve
from tests.helpers.workers import worker_env

RULE = "=" * 58


def _procfile_lines(*names: str) -> str:
    wanted = {}
    for line in (ROOT / "Procfile.dev").read_text().splitlines():
        name, _, command = line.partition(":")
        if name in names:
            wanted[name] = command.strip()
    assert set(wanted) == set(names)
    return "".join(f"{name}: {command}\n" for name, command in wanted.items())


def test_the_login_banner_comes_after_the_workers_start_up(tmp_path: Path):
    with serve(healthz) as web_port:
        (tmp_path / "demo_password").write_text("pw-for-the-test")
        procfile = tmp_path / "Procfile"
        procfile.write_text(_procfile_lines("worker", "proofs", "login"))
        env = worker_env(TOKVERA_VAR_DIR=str(tmp_path),
                         SITE_URL=f"http://127.0.0.1:{web_port}", PYTHONUNBUFFERED="1")
        honcho = subprocess.Popen(
            [str(Path(sys.executable).parent / "honcho"), "-f", str(procfile), "-d", str(ROOT),
             "start"], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, start_new_session=True)
        watchdog = threading.Timer(90, os.killpg, (honcho.pid, signal.SIGKILL))
        watchdog.start()
        lines: list[str] = []
        try:
            assert honcho.stdout is not None
            for line in honcho.stdout:
                lines.append(line.rstrip("\n"))
                if "password   pw-for-the-test" in line:
                    break
        finally:
            watchdog.cancel()
            os.killpg(honcho.pid, signal.SIGTERM)
            honcho.wait(timeout=60)
    output = "\n".join(lines)
    assert "password   pw-for-the-test" in lines[-1], output
    banner_at = max(i for i, line in enumerate(lines) if line.endswith(RULE))
    before = lines[:banner_at]
    # Both workers have said they are ready before the banner starts, so their start-up
    # output cannot push the login off the screen.
    assert any(_process(line) == "worker.1" and "ready." in line for line in before), output
    assert any(_process(line) == "proofs.1" and "ready." in line for line in before), output


def _process(line: str) -> str:
    """honcho's "HH:MM:SS name.1 | text" prefix: the process name."""
    head, bar, _ = line.partition("|")
    return head.split()[-1] if bar and head.split() else ""
