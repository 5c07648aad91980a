# Down is a state, not a grade, on the site (issue 23): existing rows of scans where the
# endpoint never answered (the preflight stopped the scan, or no request of any level
# succeeded: error_rate 1) are marked down and lose the F and points denormalized from their
# report. report.json itself is left as it is.

from django.db import migrations, models

MARK_DOWN = """
UPDATE scans_scan AS s SET down = true, grade = '', points = NULL, uncapped_grade = ''
WHERE s.status = 'succeeded' AND s.report IS NOT NULL AND (
    (s.report -> 'preflight' ->> 'stopped') = 'true'
    OR EXISTS (SELECT 1 FROM scans_checkresult AS c
               WHERE c.scan_id = s.id AND c.check_id = 'error_rate' AND c.value >= 1))
"""


class Migration(migrations.Migration):

    dependencies = [
        ('scans', '0011_endpoint_workload'),
    ]

    operations = [
        migrations.AddField(
            model_name='scan',
            name='down',
            field=models.BooleanField(default=False),
        ),
        # Not reversible into the old grades (they are in report.json): reversing only drops
        # the column.
        migrations.RunSQL(MARK_DOWN, reverse_sql=migrations.RunSQL.noop),
    ]
