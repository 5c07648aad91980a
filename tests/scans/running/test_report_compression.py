"""A stored report is compressed with lz4 where the PostgreSQL server has it
(scans/migrations/0035_report_lz4.py): cheaper for the database on every stored scan than its
default, pglz. A server built without lz4 keeps pglz, and the migration passes it by. A month
whose partition is made after the migration compresses the same way (the partition copies the
parent's setting)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import time_machine
from django.db import connection

from scans.models import Scan, ScanTrigger
from scans.running import worker as scan_worker
from tests.helpers.factories import make_endpoint
from tests.scans.conftest import report_for

pytestmark = pytest.mark.django_db


def _server_has_lz4() -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 'lz4' = ANY(enumvals) FROM pg_settings "
                       "WHERE name = 'default_toast_compression'")
        return bool(cursor.fetchone()[0])


def _stored_compression(world) -> str:
    scan = Scan.dangerously_unscoped.create(endpoint=make_endpoint(world.team),
                                            trigger=ScanTrigger.SCHEDULE)
    scan_worker.store_report(scan, report_for())
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_column_compression(report) FROM scans_scan WHERE id = %s",
                       [scan.pk])
        return cursor.fetchone()[0]


@pytest.fixture
def lz4():
    if not _server_has_lz4():
        pytest.skip("this PostgreSQL server was built without lz4")


def test_a_stored_report_is_compressed_with_lz4(world, lz4):
    assert _stored_compression(world) == "lz4"


def test_a_month_partitioned_after_the_migration_compresses_with_lz4_too(world, lz4):
    with time_machine.travel(datetime(2031, 5, 14, 12, 0, tzinfo=UTC), tick=False):
        assert _stored_compression(world) == "lz4"
