"""Helpers for tests that run the site's real processes (gunicorn, Celery workers, `tokvera
target`, host agents) on loopback: wait for a condition, see whether a port accepts, and run a
process for the length of a `with` block."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.helpers.paths import ROOT


def wait_for(predicate, seconds: float, what: str, every: float = 0.2):
    """The first truthy value of `predicate()`, polled every `every` s; fails after `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {seconds} s waiting for {what}")


def accepts(port: int) -> bool:
    """Whether something accepts TCP connections on 127.0.0.1:`port`."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        return True
    except OSError:
        return False


@contextmanager
def running(args, env: dict, log: Path | None = None, cwd: Path = ROOT):
    """`args` as a process (its output in `log`, if given) until the block ends, then
    terminated (killed if it has not exited 30 s later)."""
    out = open(log, "wb") if log else subprocess.DEVNULL  # noqa: SIM115 - closed below
    proc = subprocess.Popen(args, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if log:
            out.close()


@contextmanager
def gunicorn(env: dict, *, app: str = "tokvera_site.wsgi", workers: int = 1, threads: int | None = None,
             timeout_s: int = 60, port: int | None = None, log: Path | None = None) -> Iterator[str]:
    """The site under gunicorn on 127.0.0.1 for the length of the `with` block; yields its base
    URL (`http://127.0.0.1:PORT`) once the port accepts connections.

    `env`: the whole environment (usually `tests.helpers.workers.worker_env(...)`). `app`: the
    WSGI application (`module` or `module:name`). `threads`: gthread workers with that many
    threads each, production's shape (docs/operations.md); None keeps gunicorn's sync workers.
    `timeout_s`: gunicorn's `--timeout`. `port`: a fixed port (to restart the site where its
    clients expect it); a free one if None. `log`: gunicorn's output, shown when it fails to start.
    """
    # Imported here: scripts outside pytest (tests/perf) import this module without settings.
    from tests.conftest import free_port

    port = port or free_port()
    args = [sys.executable, "-m", "gunicorn", app, "--bind", f"127.0.0.1:{port}",
            "--workers", str(workers), "--timeout", str(timeout_s)]
    if threads is not None:
        args += ["--worker-class", "gthread", "--threads", str(threads)]
    with running(args, env, log=log) as proc:
        wait_for(lambda: accepts(port) or proc.poll() is not None, 60, f"gunicorn on port {port}")
        if proc.poll() is not None:
            output = log.read_text()[-2000:] if log else "(no log kept)"
            raise AssertionError(f"gunicorn exited with {proc.returncode} before serving: {output}")
        yield f"http://127.0.0.1:{port}"
