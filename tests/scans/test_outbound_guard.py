"""The site's outbound guard refuses internal addresses; no traffic leaves loopback here."""

from __future__ import annotations

import pytest

from scans.outbound import OutboundRefused, check_address, check_url, classify


@pytest.mark.parametrize(
    ("ip", "kind"),
    [
        ("127.0.0.1", "loopback"), ("127.8.9.10", "loopback"), ("::1", "loopback"),
        ("::ffff:127.0.0.1", "loopback"),
        ("10.1.2.3", "private"), ("172.16.0.1", "private"), ("192.168.1.1", "private"),
        ("fd00::1", "private"),
        ("100.64.0.1", "cgnat"), ("100.127.255.254", "cgnat"),
        ("169.254.169.254", "link-local"), ("fe80::1", "link-local"),
        ("224.0.0.1", "multicast"), ("ff02::1", "multicast"),
        ("0.0.0.0", "reserved"),  # noqa: S104 - classified, never bound
        ("240.0.0.1", "reserved"), ("192.0.2.1", "private"),
        ("2002:a00:1::1", "private"),  # 6to4 wrapping 10.0.0.1
        ("2001:0:4136:e378:8000:63bf:f5ff:fffe", "private"),  # Teredo wrapping 10.0.0.1
        ("fec0::1", "private"),  # deprecated site-local
        ("192.88.99.1", "reserved"), ("192.88.99.254", "reserved"),  # 6to4 relay anycast
        ("2002:c058:6301::1", "reserved"),  # 6to4 wrapping 192.88.99.1
        ("8.8.8.8", None), ("2606:4700:4700::1111", None),
    ],
)
def test_addresses_are_classified_by_range(ip, kind):
    assert classify(ip) == kind


def test_a_forbidden_address_is_refused_saying_only_that_it_is_not_reachable():
    with pytest.raises(OutboundRefused) as refused:
        check_address("169.254.169.254", allow=frozenset())
    assert str(refused.value) == "not reachable from this site"
    assert "169.254.169.254: a link-local address" in refused.value.detail  # for the server log


def test_loopback_is_reachable_only_when_allowed():
    check_address("127.0.0.1", allow=frozenset({"loopback"}))
    with pytest.raises(OutboundRefused):
        check_address("127.0.0.1", allow=frozenset())
    with pytest.raises(OutboundRefused):
        check_address("10.0.0.1", allow=frozenset({"loopback"}))


def test_a_name_is_judged_by_the_address_it_resolves_to(settings):
    settings.OUTBOUND_ALLOW = []
    with pytest.raises(OutboundRefused) as refused:
        check_url("http://localhost:8080/v1")  # resolves locally; nothing is sent
    assert "loopback" in refused.value.detail


@pytest.mark.django_db
def test_a_scan_of_the_6to4_relay_anycast_is_refused_before_any_connection(world, settings):
    from scans.models import Scan, ScanStatus
    from scans.running import worker as scan_worker
    from tests.helpers.factories import make_endpoint

    settings.OUTBOUND_ALLOW = ["loopback", "private"]
    endpoint = make_endpoint(world.team, base_url="http://192.88.99.1/v1")
    scan = scan_worker.claim(Scan.dangerously_unscoped.create(endpoint=endpoint,
                                                           trigger="manual").pk)
    assert scan_worker.execute(scan) == "errored"
    scan.refresh_from_db()
    assert scan.status == ScanStatus.ERRORED
    assert scan.error_reason == "not reachable from this site"  # the address is not told
