"""One scan over several URLs (--replica, --balance): the split, the preflight of each URL,
the connect guard on each, and the per-URL figures in report.json and requests.jsonl."""

from __future__ import annotations

import socket

import pytest

from scans.grader import PlanError, run_scan
from scans.grader.demo_server import TargetConfig, running_target
from scans.grader.measurement import served_by
from scans.grader.preflight import ReplicaError
from scans.grader.report import report_from_measurement
from scans.grader.report_text import replica_lines
from scans.grader.request_log import request_lines
from tests.helpers.servers import good_stream, plan_for, raw_server, stream_server, validate_report


def counting_server(counts: list[int]):
    def body(number: int) -> bytes:
        counts.append(number)
        return good_stream()
    return stream_server(body)


def _url(port: int) -> str:
    return f"http://127.0.0.1:{port}/v1"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_round_robin_splits_every_level_exactly_over_the_urls():
    first: list[int] = []
    second: list[int] = []
    with raw_server(counting_server(first)) as a, raw_server(counting_server(second)) as b:
        plan = plan_for(a, levels=(1, 2), requests=4, replicas=(_url(b),))
        m = run_scan(plan)
    # Each URL: its preflight probe, then half of each level's requests.
    assert len(first) == 1 + 4 and len(second) == 1 + 4
    for level in m.levels:
        assert sorted(served_by(r) for r in level.requests) == [0, 0, 1, 1]
    report = report_from_measurement(plan, m)
    validate_report(report)
    assert report["plan"]["urls"] == [_url(a), _url(b)]
    assert report["plan"]["balance"] == "round-robin"
    for entry in report["levels"]:
        assert [(u["url"], u["requests"], u["failed"]) for u in entry["by_url"]] == [
            (_url(a), 2, 0), (_url(b), 2, 0)]
        assert entry["by_url"][0]["ttft_ms"]["n"] == 2
    lines = list(request_lines(m))
    assert [line["url"] for line in lines if line["phase"] == "probe"] == [0, 1]
    assert sorted(line["url"] for line in lines if line["phase"] == "level") == [0, 0, 0, 0,
                                                                                   1, 1, 1, 1]
    texts = replica_lines(report)
    assert texts[0] == "by URL at concurrency 2 (round-robin):"
    assert texts[1].startswith(f"  {_url(a)}: 2 requests, 0 failed, TTFT p50 ")
    assert len(texts) == 3


def test_a_single_url_scan_has_no_per_url_fields():
    with raw_server(counting_server([])) as a:
        plan = plan_for(a, requests=2)
        m = run_scan(plan)
    report = report_from_measurement(plan, m)
    assert "urls" not in report["plan"] and "by_url" not in report["levels"][0]
    assert all("url" not in line for line in request_lines(m))
    assert replica_lines(report) == []


def test_least_in_flight_favours_the_faster_replica():
    with running_target(TargetConfig(ttft_ms=40, itl_ms=5, tokens=8, max_concurrency=1)) as (
            _, slow), raw_server(counting_server([])) as fast:
        plan = plan_for(slow, levels=(1, 4), requests=(4, 24), replicas=(_url(fast),),
                        balance="least-in-flight")
        m = run_scan(plan)
    top = m.levels[-1].requests
    served = [sum(1 for r in top if served_by(r) == i) for i in (0, 1)]
    assert sum(served) == 24 and served[1] > served[0]
    assert all(r.failure is None for r in top)


def test_a_replica_the_connect_guard_refuses_is_an_error_before_load():
    counts: list[int] = []
    with raw_server(counting_server(counts)) as a, raw_server(counting_server([])) as b:

        def guard(host, port, ip):
            if port == b:
                raise PermissionError("private address")

        plan = plan_for(a, levels=(1,), requests=3, replicas=(_url(b),))
        with pytest.raises(ReplicaError) as caught:
            run_scan(plan, connect_guard=guard)
    assert str(caught.value) == (f"replica {_url(b)} failed the preflight probe: the address "
                                 "was refused by the outbound guard")
    assert len(counts) == 1  # the base URL's probe, no load


def test_a_dead_replica_is_an_error_before_load_naming_it():
    counts: list[int] = []
    dead = _free_port()
    with raw_server(counting_server(counts)) as a:
        plan = plan_for(a, levels=(1,), requests=3, replicas=(_url(dead),))
        with pytest.raises(ReplicaError, match=rf"replica {_url(dead)} failed the preflight "
                                               "probe: connection refused"):
            run_scan(plan)
    assert len(counts) == 1


@pytest.mark.parametrize(("replica", "message"), [
    ("ftp://127.0.0.1:1/v1", "bad URL 'ftp://127.0.0.1:1/v1'"),
    ("http://user:pw@127.0.0.1:1/v1", "credentials in the URL are not accepted"),
    ("http://127.0.0.1:1/v1?x=1", "no query or fragment expected"),
    ("http://127.0.0.1:2/v1/", "must all differ"),
])
def test_every_replica_url_passes_the_base_urls_validation(replica, message):
    plan = plan_for(2, replicas=(replica,))
    with pytest.raises(PlanError, match=message.replace("?", r"\?")):
        plan.validate()


def test_an_unknown_balance_policy_is_refused():
    with pytest.raises(PlanError, match="--balance 'random'"):
        plan_for(2, replicas=("http://127.0.0.1:3/v1",), balance="random").validate()


def _cli(base: str, out, *extra: str) -> list[str]:
    return ["scan", base, "--model", "demo", "--concurrency", "1,2", "--requests", "4",
            "--timeout", "5", "--out", str(out), *extra]


def test_the_cli_prints_one_line_per_url_for_the_top_level(tmp_path, capsys):
    from tokvera_site.cli import main

    with raw_server(counting_server([])) as a, raw_server(counting_server([])) as b:
        assert main(_cli(_url(a), tmp_path / "r", "--replica", _url(b),
                         "--balance", "least-in-flight")) == 0
    out = capsys.readouterr().out
    assert "by URL at concurrency 2 (least-in-flight):" in out
    assert f"  {_url(a)}: " in out and f"  {_url(b)}: " in out


def test_the_cli_names_a_dead_replica_in_one_line_and_exits_2(tmp_path, capsys):
    from tokvera_site.cli import main

    dead = _free_port()
    with raw_server(counting_server([])) as a:
        assert main(_cli(_url(a), tmp_path / "r", "--replica", _url(dead))) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert f"replica {_url(dead)} failed the preflight probe: connection refused" in err
    assert not (tmp_path / "r" / "report.json").exists()
