"""Maintenance windows stored past the calendar's end (a one-off window typed to end late on
31 December 9999 in a zone behind UTC lands in the year 10,000 in UTC) cannot be read back by
psycopg, which broke every page of their team and the window's own delete. Such rows are
brought back inside what can be read in any timezone, and a window that was never valid is cut
to the longest a window may now last (scans.maintenance.MAX_LENGTH); the team can then see,
edit or delete it. New windows are bounded where they are typed (scans.maintenance.span_errors).
"""

from django.db import migrations

# Two days inside either end of what Python's datetime holds, so every zone's local time of it
# can be shown too.
LOWEST = "0001-01-03 00:00:00+00"
HIGHEST = "9999-12-29 00:00:00+00"

REPAIR_SQL = f"""
    UPDATE scans_maintenancewindow
    SET starts_at = LEAST(GREATEST(starts_at, '{LOWEST}'), '{HIGHEST}'),
        ends_at = LEAST(
            GREATEST(ends_at, '{LOWEST}'), '{HIGHEST}',
            LEAST(GREATEST(starts_at, '{LOWEST}'), '{HIGHEST}') + interval '31 days'
        )
    WHERE starts_at NOT BETWEEN '{LOWEST}' AND '{HIGHEST}'
       OR ends_at NOT BETWEEN '{LOWEST}' AND '{HIGHEST}'
"""  # noqa: S608 - constants only


class Migration(migrations.Migration):

    dependencies = [
        ("scans", "0023_h34f_scan_report_columns"),
    ]

    operations = [
        migrations.RunSQL(REPAIR_SQL, reverse_sql=migrations.RunSQL.noop),
    ]
