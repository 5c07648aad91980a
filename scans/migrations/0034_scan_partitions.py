"""scans_scan and scans_checkresult become tables PARTITIONED BY RANGE (partition_month), one
partition per UTC month (scans/models/scan_partitions.py), so retention drops whole months
instead of deleting rows.

partition_month is the month of a scan's slot (a scheduled scan), else of its queue time; a
check result has its scan's. A partitioned table's unique keys must hold the partition key, so
the primary keys become (id, partition_month) and the unique constraints name partition_month
too (the same rule: a slot's month is fixed by the slot). Django's model state keeps `id` as
the primary key: ids come from one sequence, which keeps counting where the identity stood.
No foreign key in the database points at a scan any more (it would need the pair); Django's
cascade and the retention pass take their place.

Every row is kept, with its id and every index (read from the catalog and made again on the
partitioned table, after the copy). The copy holds both tables ACCESS EXCLUSIVE: stop the scan
and proof workers and the beat first (docs/operations.md).

Reversible: the reverse makes the plain tables again, every row, index and id kept.
"""

import uuid
from datetime import UTC, datetime

import django.db.models.deletion
from django.db import migrations, models

import common.time_partitions

SCANS, CHECKS = "scans_scan", "scans_checkresult"
#: Months after the current one created ahead (as the hourly pass keeps them).
MONTHS_AHEAD = 2

#: Unique keys on the partitioned tables, which must hold partition_month.
PARTITIONED_UNIQUE = {
    SCANS: [
        "CREATE UNIQUE INDEX one_scan_per_slot_and_location ON scans_scan "
        "(endpoint_id, location, slot, partition_month) WHERE slot IS NOT NULL",
        "CREATE UNIQUE INDEX one_scan_per_pushed_report ON scans_scan "
        "(endpoint_id, report_digest, partition_month) WHERE NOT report_digest = ''",
        "ALTER TABLE scans_scan ADD CONSTRAINT one_scan_per_public_id "
        "UNIQUE (public_id, partition_month)",
    ],
    CHECKS: [
        "ALTER TABLE scans_checkresult ADD CONSTRAINT one_result_per_check "
        "UNIQUE (scan_id, check_id, partition_month)",
    ],
}
#: The same keys as they were on the plain tables.
PLAIN_UNIQUE = {
    SCANS: [
        "CREATE UNIQUE INDEX one_scan_per_slot_and_location ON scans_scan "
        "(endpoint_id, location, slot) WHERE slot IS NOT NULL",
        "CREATE UNIQUE INDEX one_scan_per_pushed_report ON scans_scan "
        "(endpoint_id, report_digest) WHERE NOT report_digest = ''",
    ],
    CHECKS: [
        "ALTER TABLE scans_checkresult ADD CONSTRAINT one_result_per_check "
        "UNIQUE (scan_id, check_id)",
    ],
}
REPLACED = {"one_scan_per_slot_and_location", "one_scan_per_pushed_report",
            "one_scan_per_public_id", "one_result_per_check"}
#: How each table's rows get their month in the copy (`c`: the old table's row).
MONTH_OF = {
    SCANS: ("SELECT {columns}, (date_trunc('month', COALESCE(c.slot, c.queued_at) "
            "AT TIME ZONE 'UTC'))::date FROM scans_scan_old AS c"),
    CHECKS: ("SELECT {columns}, s.partition_month FROM scans_checkresult_old AS c "
             "JOIN scans_scan AS s ON s.id = c.scan_id"),
}


def _columns(cursor, table, prefix=""):
    cursor.execute("SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass "
                   "AND attnum > 0 AND NOT attisdropped AND attname <> 'partition_month' "
                   "ORDER BY attnum", [table])
    return ", ".join(f"{prefix}{name}" for (name,) in cursor.fetchall())


def _sequence_position(cursor, table):
    cursor.execute("SELECT pg_get_serial_sequence(%s, 'id')", [table])
    (sequence,) = cursor.fetchone()
    cursor.execute(f"SELECT last_value, is_called FROM {sequence}")  # noqa: S608 - catalog name
    return cursor.fetchone()


def _set_aside(cursor, table):
    """Rename `table` and its indexes out of the way; return the SQL that makes its indexes
    (but the primary key and the unique keys made again by hand) and its foreign keys again,
    and the names of its check constraints."""
    cursor.execute("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = %s", [table])
    indexes = cursor.fetchall()
    cursor.execute("SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint "
                   "WHERE conrelid = %s::regclass AND contype = 'f'", [table])
    foreign = [f"ALTER TABLE {table} ADD CONSTRAINT {name} {definition}"
               for name, definition in cursor.fetchall()]
    cursor.execute(f"ALTER TABLE {table} RENAME TO {table}_old")
    remake = []
    for name, definition in indexes:
        cursor.execute(f"ALTER INDEX {name} RENAME TO {name}_old")
        if name != f"{table}_pkey" and name not in REPLACED:
            remake.append(definition)
    return remake + foreign


def _partition(cursor, table, months):
    position = _sequence_position(cursor, table)
    remake = _set_aside(cursor, table)
    columns = _columns(cursor, f"{table}_old")
    cursor.execute(f"CREATE SEQUENCE {table}_id_partitioned_seq AS bigint")
    cursor.execute(f"""
        CREATE TABLE {table} (
            LIKE {table}_old INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE
                INCLUDING COMPRESSION,
            partition_month date NOT NULL,
            CONSTRAINT {table}_pkey PRIMARY KEY (id, partition_month)
        ) PARTITION BY RANGE (partition_month)
    """)
    cursor.execute(f"ALTER TABLE {table} ALTER COLUMN id "
                   f"SET DEFAULT nextval('{table}_id_partitioned_seq')")
    cursor.execute(f"ALTER SEQUENCE {table}_id_partitioned_seq OWNED BY {table}.id")
    cursor.execute(f"SELECT setval('{table}_id_partitioned_seq', %s, %s)", position)
    for month in sorted(months):
        # named and bounded as scans/models/scan_partitions.py makes them later (a frozen
        # copy; the table is held ACCESS EXCLUSIVE here anyway)
        following = common.time_partitions.next_month(month)
        cursor.execute(f"CREATE TABLE {table}_p{month:%Y%m} PARTITION OF {table} "
                       f"FOR VALUES FROM ('{month.isoformat()}') TO ('{following.isoformat()}')")
    copied = MONTH_OF[table].format(columns=_columns(cursor, f"{table}_old", "c."))
    cursor.execute(f"INSERT INTO {table} ({columns}, partition_month) {copied}")
    for sql in remake + PARTITIONED_UNIQUE[table]:
        cursor.execute(sql)


def _months(cursor):
    """The months that have scans, this one and those kept ahead."""
    cursor.execute("SELECT DISTINCT (date_trunc('month', COALESCE(slot, queued_at) "
                   "AT TIME ZONE 'UTC'))::date FROM scans_scan")
    months = {month for (month,) in cursor.fetchall()}
    month = common.time_partitions.month_start(datetime.now(UTC))
    for _ in range(MONTHS_AHEAD + 1):
        months.add(month)
        month = common.time_partitions.next_month(month)
    return months


def _analyze_if_filled(cursor, table):
    """Statistics for a copied table at once: until autovacuum gets to it the pages' plans guess
    (several times slower), and autovacuum never analyzes a partitioned parent. An empty one
    is left unanalyzed: statistics of nothing would plan every later query as for nothing."""
    cursor.execute(f"SELECT EXISTS (SELECT 1 FROM {table})")  # noqa: S608 - a constant
    if cursor.fetchone()[0]:
        cursor.execute(f"ANALYZE {table}")


def partition(apps, schema_editor):
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(f"LOCK TABLE {SCANS}, {CHECKS} IN ACCESS EXCLUSIVE MODE")
        months = _months(cursor)
        for table in (SCANS, CHECKS):  # the checks' copy reads the scans' months
            _partition(cursor, table, months)
        for table in (CHECKS, SCANS):
            cursor.execute(f"DROP TABLE {table}_old")  # and its identity's sequence
            cursor.execute(f"ALTER SEQUENCE {table}_id_partitioned_seq RENAME TO {table}_id_seq")
            _analyze_if_filled(cursor, table)


def _unpartition(cursor, table):
    position = _sequence_position(cursor, table)
    remake = _set_aside(cursor, table)
    columns = _columns(cursor, f"{table}_old")
    cursor.execute(f"ALTER SEQUENCE {table}_id_seq RENAME TO {table}_id_partitioned_seq")
    cursor.execute(f"""
        CREATE TABLE {table} (
            LIKE {table}_old INCLUDING CONSTRAINTS INCLUDING STORAGE INCLUDING COMPRESSION
        )
    """)
    cursor.execute(f"ALTER TABLE {table} DROP COLUMN partition_month")
    cursor.execute(f"ALTER TABLE {table} ALTER COLUMN id ADD GENERATED BY DEFAULT AS IDENTITY")
    cursor.execute(f"ALTER TABLE {table} ADD CONSTRAINT {table}_pkey PRIMARY KEY (id)")
    cursor.execute(f"INSERT INTO {table} ({columns}) "  # noqa: S608 - constants
                   f"SELECT {columns} FROM {table}_old")
    cursor.execute(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), %s, %s)", position)
    for sql in remake + PLAIN_UNIQUE[table]:
        cursor.execute(sql)
    cursor.execute(f"DROP TABLE {table}_old")  # its partitions and sequence with it


def unpartition(apps, schema_editor):
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(f"LOCK TABLE {SCANS}, {CHECKS} IN ACCESS EXCLUSIVE MODE")
        for table in (SCANS, CHECKS):
            _unpartition(cursor, table)
            _analyze_if_filled(cursor, table)


class Migration(migrations.Migration):

    dependencies = [
        ("accounts", "0006_team_sso"),
        ("scans", "0033_probe_partitions"),
    ]

    operations = [
        # No foreign key in the database may point at a partitioned table's `id` alone: drop
        # them (the state keeps the relations; Django cascades deletes itself).
        migrations.AlterField(
            model_name="alertevent",
            name="scan",
            field=models.ForeignKey(blank=True, db_constraint=False, null=True,
                                    on_delete=django.db.models.deletion.CASCADE,
                                    related_name="+", to="scans.scan"),
        ),
        migrations.AlterField(
            model_name="checkresult",
            name="scan",
            field=models.ForeignKey(db_constraint=False, db_index=False,
                                    on_delete=django.db.models.deletion.CASCADE,
                                    related_name="check_results", to="scans.scan"),
        ),
        migrations.AlterField(
            model_name="pushedreportbody",
            name="scan",
            field=models.OneToOneField(db_constraint=False,
                                       on_delete=django.db.models.deletion.CASCADE,
                                       primary_key=True, related_name="pushed_body",
                                       serialize=False, to="scans.scan"),
        ),
        # unique alone cannot be kept: an index, and unique with the month below
        migrations.AlterField(
            model_name="scan",
            name="public_id",
            field=models.UUIDField(db_index=True, default=uuid.uuid4,
                                   editable=False),
        ),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveConstraint(model_name="checkresult",
                                            name="one_result_per_check"),
                migrations.RemoveConstraint(model_name="scan",
                                            name="one_scan_per_pushed_report"),
                migrations.RemoveConstraint(model_name="scan",
                                            name="one_scan_per_slot_and_location"),
                migrations.AddField(
                    model_name="checkresult",
                    name="partition_month",
                    field=models.DateField(default=None),
                    preserve_default=False,
                ),
                migrations.AddField(
                    model_name="scan",
                    name="partition_month",
                    field=models.DateField(default=common.time_partitions.this_month,
                                           editable=False),
                ),
                migrations.AddConstraint(
                    model_name="checkresult",
                    constraint=models.UniqueConstraint(
                        fields=("scan", "check_id", "partition_month"),
                        name="one_result_per_check"),
                ),
                migrations.AddConstraint(
                    model_name="scan",
                    constraint=models.UniqueConstraint(
                        condition=models.Q(("slot__isnull", False)),
                        fields=("endpoint", "location", "slot", "partition_month"),
                        name="one_scan_per_slot_and_location"),
                ),
                migrations.AddConstraint(
                    model_name="scan",
                    constraint=models.UniqueConstraint(
                        condition=models.Q(("report_digest", ""), _negated=True),
                        fields=("endpoint", "report_digest", "partition_month"),
                        name="one_scan_per_pushed_report"),
                ),
                migrations.AddConstraint(
                    model_name="scan",
                    constraint=models.UniqueConstraint(
                        fields=("public_id", "partition_month"),
                        name="one_scan_per_public_id"),
                ),
            ],
            database_operations=[migrations.RunPython(partition, unpartition)],
        ),
    ]
