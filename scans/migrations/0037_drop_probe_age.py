"""probe_age (probe results by time alone) goes: retention drops a day's partition whole
instead of deleting rows by age, and every read is one endpoint's (probe_history). One index
less to write at every probe."""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ("scans", "0036_rollup_hour_age"),
    ]

    operations = [
        # Reversible: the reverse makes it again (on the partitioned table, each partition's).
        migrations.RemoveIndex(model_name="proberesult", name="probe_age"),
    ]
