"""Privacy floors counted by operator (the team that runs a host), the order of the hardware
list, and the one half-up rounding rule of every published figure (docs/methodology.md)."""

from __future__ import annotations

import json

import pytest
import time_machine
from django.test import Client

from accounts import teams
from benchmarks.models import JobStatus
from benchmarks.public import snapshot
from tests.conftest import make_user
from tests.helpers.network import T0, make_catalog, make_host, make_job

pytestmark = pytest.mark.django_db


@pytest.fixture
def operators():
    acme = teams.create_team("acme-corp", "ACME Corp", owner=make_user("acme-owner"))
    other = teams.create_team("other-ops", "Other Ops", owner=make_user("other-owner"))
    make_catalog("alpha-q4", context_len=8192)
    return acme, other


def _surfaces() -> tuple[dict, str]:
    with time_machine.travel(T0, tick=False):
        client = Client()
        return client.get("/v1/stats").json(), client.get("/benchmarks").content.decode()


def _tier(page: str, tier: str) -> str:
    return page.split(f'data-tier="{tier}"', 1)[1].split("</tr>", 1)[0]


def test_a_gpu_name_reported_by_two_hosts_of_one_operator_is_not_published(operators):
    acme, other = operators
    leaky = "ACME-Corp cfo@acme.example"
    make_host(acme, "acme-1", models=["alpha-q4"], gpu=leaky)
    make_host(acme, "acme-2", models=["alpha-q4"], gpu=leaky)
    make_host(other, "other-1", models=["alpha-q4"], gpu="RTX 4090")
    make_host(acme, "acme-3", models=["alpha-q4"], gpu="RTX 4090")

    stats, page = _surfaces()

    assert "acme" not in json.dumps(stats).lower() and "acme" not in page.lower()
    assert stats["hardware"] == [{"gpu": "RTX 4090", "hosts": 2}, {"gpu": "other", "hosts": 2}]


def test_a_tier_cell_of_one_operators_hosts_is_a_dash_not_their_own_averages(operators):
    acme, other = operators
    make_host(acme, "acme-edr-1", "edr", models=["alpha-q4"], ttft=111.0, tps=22.0)
    make_host(acme, "acme-edr-2", "edr", models=["alpha-q4"], ttft=333.0, tps=44.0)
    make_host(other, "other-edr-new", "edr", models=["alpha-q4"])  # no EWMA yet: no sample
    make_host(other, "lone-none", "none", models=["alpha-q4"], ttft=555.0, tps=66.0)

    edr, none = snapshot.build_snapshot(T0)["models"][0]["tiers"][2::-2]
    _, page = _surfaces()

    assert edr == {"tier": "edr", "hosts": 3, "ttft_p50_ms": None, "ttft_p95_ms": None, "tps_p50": None}
    assert none == {"tier": "none", "hosts": 1, "ttft_p50_ms": None, "ttft_p95_ms": None, "tps_p50": None}
    for row in (_tier(page, "edr"), _tier(page, "none")):
        assert row.count('title="Not enough samples">\u2014</td>') == 3
    for value in ("111", "333", "555", "22.0", "44.0", "66.0"):
        assert value not in page


def test_a_tier_cell_is_published_once_hosts_of_two_operators_give_samples(operators):
    acme, other = operators
    make_host(acme, "acme-edr", "edr", models=["alpha-q4"], ttft=200.5, tps=40.25)
    make_host(other, "other-edr", "edr", models=["alpha-q4"], ttft=400.0, tps=80.0)

    edr = snapshot.build_snapshot(T0)["models"][0]["tiers"][2]

    # Rounded half up like every published figure: 200.5 → 201 ms, 40.25 → 40.3 tok/s.
    assert edr == {"tier": "edr", "hosts": 2, "ttft_p50_ms": 201, "ttft_p95_ms": 400, "tps_p50": 40.3}


def test_hardware_rows_go_by_count_then_name_with_other_and_no_gpu_last(operators):
    acme, other = operators
    for i in range(5):
        make_host((acme, other)[i % 2], f"bare-{i}", models=["alpha-q4"])  # no GPU reported
    for gpu, count in (("RTX 4090", 3), ("A100", 3), ("H100", 4)):
        for i in range(count):
            make_host((acme, other)[i % 2], f"{gpu}-{i}", models=["alpha-q4"], gpu=gpu)
    make_host(acme, "rare-1", models=["alpha-q4"], gpu="M2 Ultra")
    make_host(other, "rare-2", models=["alpha-q4"], gpu="other")  # a literal "other" is folded too

    stats, page = _surfaces()

    assert stats["hardware"] == [
        {"gpu": "H100", "hosts": 4}, {"gpu": "A100", "hosts": 3}, {"gpu": "RTX 4090", "hosts": 3},
        {"gpu": "other", "hosts": 2}, {"gpu": None, "hosts": 5},
    ]
    # "GPU models online" counts names, not the "other" row.
    assert '<span class="value">3</span><span class="label">GPU models online</span>' in page


def test_the_success_share_on_the_page_rounds_half_up(operators):
    acme, _ = operators
    for i in range(16):  # 13 of 16: 81.25 % is shown as 81.3 %, not float formatting's 81.2 %
        make_job(acme, "alpha-q4", JobStatus.COMPLETED if i < 13 else JobStatus.FAILED)

    _, page = _surfaces()

    assert "81.3\u00a0%" in page


@pytest.mark.parametrize(("value", "decimals", "expected"), [
    (40.25, 1, 40.3), (40.24, 1, 40.2), (0.15, 1, 0.2), (200.5, 0, 201), (199.49, 0, 199),
])
def test_half_up_rounds_the_decimal_a_reader_sees(value, decimals, expected):
    assert snapshot.half_up(value, decimals) == expected
