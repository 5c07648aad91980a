"""scans_proberesult becomes a table PARTITIONED BY RANGE (at), one partition per UTC day
(scans/liveness/partitions.py), so retention drops whole days instead of deleting rows.

Every row is kept, with its id: the old table is renamed, the new one made with a partition
for each day that has rows and for today and the days ahead, the rows copied, the old table
dropped. `id` keeps counting where it stood (a sequence owned by the column, set to the old
identity's position: PostgreSQL before 17 has no identity column on a partitioned table).

The database's primary key is (id, at): a partitioned table's unique keys must hold its
partition key. Django's model state keeps `id` as the primary key (no state operation here):
ids come from one sequence, so `id` alone stays unique, and the ORM inserts, selects, updates
and deletes by it unchanged. The foreign key to scans_endpoint and the indexes probe_history
and probe_age are made again on the partitioned table (partitioned indexes: each partition
has its own). The copy holds the table ACCESS EXCLUSIVE: probe batches wait for it.

Reversible: the reverse makes the plain table again the same way, every row and the id's
position kept.
"""

from datetime import UTC, datetime, time, timedelta

from django.db import migrations

TABLE = "scans_proberesult"
COLUMNS = "id, location, at, ok, counted, status_code, ttft_ms, kind, cause, endpoint_id"
FIELDS = """
    location varchar(40) NOT NULL,
    at timestamp with time zone NOT NULL,
    ok boolean NOT NULL,
    counted boolean NOT NULL,
    status_code smallint NULL CONSTRAINT scans_proberesult_status_code_check
        CHECK (status_code >= 0),
    ttft_ms double precision NULL,
    kind varchar(24) NOT NULL,
    cause varchar(300) NOT NULL,
    endpoint_id bigint NOT NULL
"""
INDEXES = (f"CREATE INDEX probe_history ON {TABLE} (endpoint_id, at DESC)",
           f"CREATE INDEX probe_age ON {TABLE} (at)")


def _sequence_position(cursor):
    cursor.execute(f"SELECT pg_get_serial_sequence('{TABLE}', 'id')")
    (sequence,) = cursor.fetchone()
    cursor.execute(f"SELECT last_value, is_called FROM {sequence}")  # noqa: S608 - catalog name
    return cursor.fetchone()


def _foreign_key_name(cursor):
    cursor.execute("SELECT conname FROM pg_constraint WHERE conrelid = %s::regclass "
                   "AND contype = 'f'", [TABLE])
    (name,) = cursor.fetchone()
    return name


def _set_aside(cursor, suffix):
    """The table and its index names moved out of the way, under `suffix`."""
    cursor.execute(f"ALTER TABLE {TABLE} RENAME TO {TABLE}_{suffix}")
    for index in (f"{TABLE}_pkey", "probe_history", "probe_age"):
        cursor.execute(f"ALTER INDEX {index} RENAME TO {index}_{suffix}")


def _finish(cursor, suffix, foreign_key):
    """Indexes and the foreign key on the new table (after the copy: built once, not row by
    row), then the old table gone."""
    for sql in INDEXES:
        cursor.execute(sql)
    cursor.execute(f"ALTER TABLE {TABLE} ADD CONSTRAINT {foreign_key} FOREIGN KEY (endpoint_id) "
                   f"REFERENCES scans_endpoint (id) DEFERRABLE INITIALLY DEFERRED")
    cursor.execute(f"DROP TABLE {TABLE}_{suffix}")


def _make_partitions(cursor, days):
    """A partition for each of `days`, named and bounded as scans/liveness/partitions.py makes
    them later (a frozen copy: a migration does the same whatever later code says; the table
    is held ACCESS EXCLUSIVE here anyway, so PARTITION OF costs nothing more)."""
    for day in sorted(set(days)):
        start = datetime.combine(day, time(), UTC)
        cursor.execute(f"CREATE TABLE {TABLE}_p{day:%Y%m%d} PARTITION OF {TABLE} "
                       f"FOR VALUES FROM ('{start.isoformat()}') "
                       f"TO ('{(start + timedelta(days=1)).isoformat()}')")


def partition(apps, schema_editor):
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(f"LOCK TABLE {TABLE} IN ACCESS EXCLUSIVE MODE")
        position, foreign_key = _sequence_position(cursor), _foreign_key_name(cursor)
        _set_aside(cursor, "unpartitioned")
        cursor.execute(f"CREATE SEQUENCE {TABLE}_id_partitioned_seq AS bigint")
        cursor.execute(f"""
            CREATE TABLE {TABLE} (
                id bigint NOT NULL DEFAULT nextval('{TABLE}_id_partitioned_seq'),
                {FIELDS},
                CONSTRAINT {TABLE}_pkey PRIMARY KEY (id, at)
            ) PARTITION BY RANGE (at)
        """)
        cursor.execute(f"ALTER SEQUENCE {TABLE}_id_partitioned_seq OWNED BY {TABLE}.id")
        cursor.execute(f"SELECT setval('{TABLE}_id_partitioned_seq', %s, %s)", position)
        cursor.execute(f"SELECT DISTINCT (at AT TIME ZONE 'UTC')::date "  # noqa: S608
                       f"FROM {TABLE}_unpartitioned")
        today = datetime.now(UTC).date()
        # the days that have rows, today and the three the site keeps ahead
        _make_partitions(cursor, [*(day for (day,) in cursor.fetchall()),
                                  *(today + timedelta(days=n) for n in range(4))])
        cursor.execute(f"INSERT INTO {TABLE} ({COLUMNS}) "  # noqa: S608 - constants
                       f"SELECT {COLUMNS} FROM {TABLE}_unpartitioned")
        _finish(cursor, "unpartitioned", foreign_key)  # drops the identity's sequence too
        cursor.execute(f"ALTER SEQUENCE {TABLE}_id_partitioned_seq RENAME TO {TABLE}_id_seq")


def unpartition(apps, schema_editor):
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(f"LOCK TABLE {TABLE} IN ACCESS EXCLUSIVE MODE")
        position, foreign_key = _sequence_position(cursor), _foreign_key_name(cursor)
        _set_aside(cursor, "partitioned")
        cursor.execute(f"ALTER SEQUENCE {TABLE}_id_seq RENAME TO {TABLE}_id_partitioned_seq")
        cursor.execute(f"""
            CREATE TABLE {TABLE} (
                id bigint NOT NULL GENERATED BY DEFAULT AS IDENTITY
                    CONSTRAINT {TABLE}_pkey PRIMARY KEY,
                {FIELDS}
            )
        """)
        cursor.execute(f"INSERT INTO {TABLE} ({COLUMNS}) "  # noqa: S608 - constants
                       f"SELECT {COLUMNS} FROM {TABLE}_partitioned")
        cursor.execute(f"SELECT setval(pg_get_serial_sequence('{TABLE}', 'id'), %s, %s)",
                       position)
        _finish(cursor, "partitioned", foreign_key)  # its partitions and sequence with it


class Migration(migrations.Migration):

    dependencies = [
        ("scans", "0032_agent_workload"),
    ]

    operations = [
        migrations.RunPython(partition, unpartition),
    ]
