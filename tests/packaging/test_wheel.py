"""The wheel works on its own: built from the project, installed into a fresh virtual
environment and run from outside the checkout, it scans `tokvera target`, publishes the report
to a site served from the same install, and serves the methodology page.

What the code reads at run time (report.schema.json, methodology.md, report.html, the site's
templates) must be package data: a checkout-only file makes one of these steps fail. The
environment borrows the project environment's installed dependencies (a .pth line, so nothing is
downloaded); the project's own packages come from the wheel, which the first test checks.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
from contextlib import contextmanager
from pathlib import Path

import httpx
import psycopg
import pytest

from tests.conftest import free_port, scratch_database
from tests.helpers.paths import ROOT
from tests.helpers.processes import accepts, running

PACKAGES = ("common", "accounts", "audit", "scans", "benchmarks", "tokvera_site")
MODEL = "tiny"


def _run(args, env, cwd, timeout=240) -> str:
    done = subprocess.run(args, env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, check=False)
    assert done.returncode == 0, f"{args[:3]} exited {done.returncode}:\n{done.stderr[-3000:]}"
    return done.stdout


def _wait_until_listening(port: int, proc: subprocess.Popen, log: Path, what: str) -> None:
    deadline = time.monotonic() + 60
    while not accepts(port):
        assert proc.poll() is None, f"{what} exited: {log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"{what} did not listen: {log.read_text()[-3000:]}"
        time.sleep(0.2)


@contextmanager
def _serving(args, env, cwd: Path, port: int, what: str):
    log = cwd / f"{what}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(args, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            _wait_until_listening(port, proc, log, what)
            yield log
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _clean_env(**extra: str) -> dict:
    """No trace of the checkout: no PYTHONPATH, no settings module unless given."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "DJANGO_SETTINGS_MODULE", "DATABASE_URL", "VIRTUAL_ENV")}
    return {**env, **extra}


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A virtual environment with the project's wheel installed; its bin/ folder."""
    base = tmp_path_factory.mktemp("wheel")
    # Build from a copy, so the build leaves nothing in the checkout; copying follows the
    # packages' links to docs/, templates/ and static/, as the wheel build does.
    source = base / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for package in PACKAGES:
        shutil.copytree(ROOT / package, source / package,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    dist = base / "dist"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(source)],
         os.environ, base)
    wheel = next(dist.glob("tokvera_site-*.whl"))

    venv = base / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], os.environ, base)
    python = venv / "bin" / "python"
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q",
          str(wheel)], os.environ, base)
    # The dependencies: this environment's site-packages, after the venv's own (a plain path
    # line, so the editable install of the checkout found there is not activated).
    venv_site = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          _clean_env(), base).strip())
    (venv_site / "zz_project_dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    return venv / "bin"


def test_the_installed_packages_are_the_wheels_not_the_checkout(installed, tmp_path):
    where = json.loads(_run([str(installed / "python"), "-c",
                             "import json, common, accounts, scans, benchmarks, tokvera_site; "
                             "print(json.dumps([m.__file__ for m in "
                             "(common, accounts, scans, benchmarks, tokvera_site)]))"],
                            _clean_env(), tmp_path))
    venv = installed.parent.resolve()
    assert all(Path(path).resolve().is_relative_to(venv) for path in where), where


def test_the_installed_cli_scans_the_installed_target_and_the_installed_site_takes_the_report(
        installed, tmp_path):
    target_port, site_port = free_port(), free_port()
    database = scratch_database("wheel")
    site_env = _clean_env(
        DJANGO_SETTINGS_MODULE="tokvera_site.settings", DATABASE_URL=database,
        CACHE_URL="dbcache://tokvera_cache",
        SECRET_KEY="wheel-" + "k" * 40, DEBUG="0", TOKVERA_VAR_DIR=str(tmp_path / "var"))
    django_admin = [str(installed / "python"), "-m", "django"]  # no manage.py in a wheel
    _run([*django_admin, "migrate", "--noinput", "-v", "0"], site_env, tmp_path)
    _run([*django_admin, "createcachetable"], site_env, tmp_path)
    _run([*django_admin, "createteam", "acme", "--owner", "ana@example.test"], site_env, tmp_path)
    token = _run([*django_admin, "createtoken", "--team", "acme", "--scope", "read-write"],
                 site_env, tmp_path).strip()
    site = f"http://127.0.0.1:{site_port}"
    base_url = f"http://127.0.0.1:{target_port}/v1"

    with (_serving([str(installed / "tokvera"), "target", "--port", str(target_port),
                    "--ttft-ms", "5", "--itl-ms", "1", "--tokens", "8"],
                   _clean_env(), tmp_path, target_port, "target"),
          _serving([str(installed / "python"), "-m", "gunicorn", "tokvera_site.wsgi", "--bind",
                    f"127.0.0.1:{site_port}", "--workers", "1", "--timeout", "60"],
                   site_env, tmp_path, site_port, "site") as site_log,
          # The proof worker: a pushed report is proven there, and the CLI waits for it
          #. The embedded broker's message files are shared through TOKVERA_VAR_DIR.
          running([str(installed / "python"), "-m", "celery", "-A", "tokvera_site", "worker",
                   "-Q", "proofs", "--pool", "solo", "--without-gossip", "--without-mingle",
                   "--without-heartbeat", "-l", "WARNING"],
                  site_env, tmp_path / "proofs.log", cwd=tmp_path)):
        api = httpx.Client(base_url=site, headers={"Authorization": f"Bearer {token}"},
                           trust_env=False, timeout=30)
        created = api.post("/api/v1/endpoints/", json={
            "name": "from the wheel", "base_url": base_url, "model": MODEL, "mode": "pushed",
            "levels": [1]})
        assert created.status_code == 201, created.text
        endpoint_id = created.json()["id"]

        # The CLI runs with no settings and no database: the grader needs neither.
        _run([str(installed / "tokvera"), "scan", base_url, "--model", MODEL,
              "--concurrency", "1", "--requests", "4", "--quiet", "--out", str(tmp_path / "out"),
              "--publish", site, "--token-env", "TOKVERA_TOKEN", "--endpoint", endpoint_id],
             _clean_env(TOKVERA_TOKEN=token), tmp_path)
        report = json.loads((tmp_path / "out" / "report.json").read_text())
        html = (tmp_path / "out" / "report.html").read_text()
        methodology = httpx.get(f"{site}/benchmarks/methodology", trust_env=False, timeout=30)
        scans = api.get(f"/api/v1/endpoints/{endpoint_id}/scans/")
        log = site_log.read_text()

    assert report["levels"][0]["succeeded"] == 4 and report["score"]["grade"]
    assert f"Endpoint report: {MODEL}" in html and "<svg" in html
    with psycopg.connect(database) as conn:
        stored = conn.execute("SELECT trigger, grade FROM scans_scan").fetchall()
    assert stored == [("push", report["score"]["grade"])], (stored, log[-3000:])
    assert scans.status_code == 200, scans.text
    assert methodology.status_code == 200, log[-3000:]
    first_heading = next(line for line in (ROOT / "docs" / "methodology.md").read_text(
        encoding="utf-8").splitlines() if line.startswith("# "))
    assert first_heading[2:].strip() in methodology.text
