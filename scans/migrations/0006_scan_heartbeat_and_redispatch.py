from django.db import migrations, models
from django.utils import timezone


def send_waiting_scans_again(apps, schema_editor):
    # Queued scans from before this change may wait in a worker's retry messages; let the beat
    # send them once more (a second delivery of a claimed scan does nothing).
    Scan = apps.get_model("scans", "Scan")
    Scan._default_manager.filter(status="queued").exclude(trigger="push").update(redispatch_at=timezone.now())


class Migration(migrations.Migration):

    dependencies = [
        ("scans", "0005_pushed_report_digest"),
    ]

    operations = [
        migrations.AddField(
            model_name="scan",
            name="heartbeat_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="scan",
            name="redispatch_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.RunPython(send_waiting_scans_again, migrations.RunPython.noop),
    ]
