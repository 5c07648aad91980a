"""`tokvera scan --publish`: a scan made where the site cannot reach is uploaded; the site answers
202 and its proof worker (a real Celery worker on the "proofs" queue) re-grades it from its
samples; the CLI waits for that verdict and prints it: the site's grade, or its reasons for
refusing the report."""

from __future__ import annotations

import pytest

from scans.grader.demo_server import TargetConfig, running_target
from scans.models import Scan
from tests.helpers.factories import make_endpoint
from tokvera_site.cli import main

pytestmark = pytest.mark.django_db(transaction=True)


def _scan(tmp_path, base_url, *extra):
    return main(["scan", base_url, "--model", "tiny", "--concurrency", "1,2", "--requests", "3",
                 "--out", str(tmp_path / "out"), *extra])


@pytest.mark.redis
def test_a_published_report_is_stored_as_a_pushed_scan(world, live_server, tmp_path,
                                                        monkeypatch, capsys, proof_worker):
    monkeypatch.setenv("TOKVERA_TOKEN", world.read_write_token)
    monkeypatch.setenv("COLUMNS", "200")  # the published line unwrapped
    with running_target(TargetConfig(ttft_ms=5, itl_ms=1, tokens=8)) as (host, port):
        endpoint = make_endpoint(world.team, mode="pushed", model="tiny",
                                 base_url=f"http://{host}:{port}/v1")
        code = _scan(tmp_path, f"http://{host}:{port}/v1", "--publish", live_server.url,
                     "--token-env", "TOKVERA_TOKEN", "--endpoint", str(endpoint.public_id))
    out = capsys.readouterr()
    assert code == 0, out.err
    scan = Scan.dangerously_unscoped.get(endpoint=endpoint)
    assert scan.pushed and scan.status == "succeeded"  # the worker's verdict, waited for
    assert (f"published as scan {scan.public_id} (grade {scan.grade} as graded by the site)"
            in out.out)
    assert world.read_write_token not in out.out + out.err
    local = (tmp_path / "out" / "report.json").read_text()
    assert world.read_write_token not in local


@pytest.mark.redis
def test_a_report_the_site_refuses_prints_its_reasons_after_waiting(world, live_server, tmp_path,
                                                                     monkeypatch, capsys,
                                                                     proof_worker):
    endpoint = make_endpoint(world.team, mode="pushed", model="tiny",
                             base_url="https://llm.internal.example/v1")
    monkeypatch.setenv("TOKVERA_TOKEN", world.read_write_token)
    with running_target(TargetConfig(ttft_ms=5, itl_ms=1, tokens=8)) as (host, port):
        code = _scan(tmp_path, f"http://{host}:{port}/v1", "--publish", live_server.url,
                     "--token-env", "TOKVERA_TOKEN", "--endpoint", str(endpoint.public_id))
    err = capsys.readouterr().err
    scan = Scan.dangerously_unscoped.get(endpoint=endpoint)
    assert code == 1 and scan.status == "refused"
    assert (f"not published: the site refused the report (scan {scan.public_id}): "
            f"target.base_url is on http://{host}:{port}, not this endpoint's origin "
            "https://llm.internal.example:443: the report measured another server") in err


def test_a_scheduled_endpoint_refuses_the_publish_at_once(world, live_server, tmp_path,
                                                          monkeypatch, capsys):
    endpoint = make_endpoint(world.team, mode="scheduled", model="tiny")
    monkeypatch.setenv("TOKVERA_TOKEN", world.read_write_token)
    with running_target(TargetConfig(ttft_ms=5, itl_ms=1, tokens=8)) as (host, port):
        code = _scan(tmp_path, f"http://{host}:{port}/v1", "--publish", live_server.url,
                     "--token-env", "TOKVERA_TOKEN", "--endpoint", str(endpoint.public_id))
    assert code == 1
    assert "not published: the site answered 409" in capsys.readouterr().err
    assert not Scan.dangerously_unscoped.filter(endpoint=endpoint).exists()


def test_a_read_only_token_cannot_publish_and_the_report_stays_local(world, live_server, tmp_path,
                                                                      monkeypatch, capsys):
    endpoint = make_endpoint(world.team, mode="pushed", model="tiny")
    monkeypatch.setenv("TOKVERA_TOKEN", world.read_only_token)
    with running_target(TargetConfig(ttft_ms=5, itl_ms=1, tokens=8)) as (host, port):
        code = _scan(tmp_path, f"http://{host}:{port}/v1", "--publish", live_server.url,
                     "--token-env", "TOKVERA_TOKEN", "--endpoint", str(endpoint.public_id))
    assert code == 1
    assert "not published: the site answered 403" in capsys.readouterr().err
    assert (tmp_path / "out" / "report.json").exists()
    assert not Scan.dangerously_unscoped.filter(endpoint=endpoint).exists()


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--publish", "http://127.0.0.1:1"], "go together"),
        (["--publish", "ftp://x", "--token-env", "T", "--endpoint", "x"], "expected http(s)"),
        (["--publish", "http://127.0.0.1:1", "--token-env", "T", "--endpoint", "nope"], "UUID"),
        (["--publish", "http://127.0.0.1:1", "--token-env", "UNSET_VAR_XYZ",
          "--endpoint", "6f1c1f9e-1b8e-4d3a-9a53-4a3c3f0e2b11"], "not set"),
    ],
)
def test_bad_publishing_flags_are_usage_errors_before_any_load(tmp_path, capsys, flags, message,
                                                              monkeypatch):
    monkeypatch.setenv("T", "tkv_x")
    assert _scan(tmp_path, "http://127.0.0.1:1/v1", *flags) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
