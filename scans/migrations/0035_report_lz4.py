"""scans_scan.report is compressed with lz4 instead of pglz (PostgreSQL's default): compressing
a stored report was a large part of PostgreSQL's CPU per stored scan, and lz4 does it several
times faster, for a few per cent more bytes. Nothing is rewritten: a value is compressed the new
way when it is next written (a new report, or a report pruned to its summary).

Set on the parent table and on each partition, since a partition keeps its own setting; a
partition made later copies the parent's (common/time_partitions.py creates it LIKE the parent,
INCLUDING COMPRESSION). A server built without lz4 (the embedded PostgreSQL wheel, say) keeps
pglz: this migration then changes nothing. Each ALTER changes the catalog only, holding its
table for a moment.

Reversible: the reverse sets the server's default back.
"""

from django.db import migrations

TABLE = "scans_scan"
COLUMN = "report"


def _tables(cursor) -> list[str]:
    cursor.execute("SELECT c.relname FROM pg_inherits AS i JOIN pg_class AS c "
                   "ON c.oid = i.inhrelid WHERE i.inhparent = %s::regclass ORDER BY 1", [TABLE])
    return [TABLE] + [name for (name,) in cursor.fetchall()]


def _lz4_available(cursor) -> bool:
    cursor.execute("SELECT 'lz4' = ANY(enumvals) FROM pg_settings "
                   "WHERE name = 'default_toast_compression'")
    row = cursor.fetchone()
    return bool(row and row[0])


def _set_compression(schema_editor, method: str) -> None:
    with schema_editor.connection.cursor() as cursor:
        if not _lz4_available(cursor):
            return
        for table in _tables(cursor):  # catalog names, never input
            cursor.execute(f"ALTER TABLE {table} ALTER COLUMN {COLUMN} SET COMPRESSION {method}")


def to_lz4(apps, schema_editor):
    _set_compression(schema_editor, "lz4")


def to_default(apps, schema_editor):
    _set_compression(schema_editor, "DEFAULT")


class Migration(migrations.Migration):

    dependencies = [
        ("scans", "0034_scan_partitions"),
    ]

    operations = [
        migrations.RunPython(to_lz4, to_default),
    ]
