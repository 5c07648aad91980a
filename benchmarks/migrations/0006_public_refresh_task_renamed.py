"""The public snapshot's periodic rebuild moved from benchmarks.public_tasks to benchmarks.tasks:
point an existing beat row at the new name (new installs get it from the app's periodic_tasks, common/periodic_tasks.py)."""

from django.db import migrations

OLD = "benchmarks.public_tasks.refresh_public_benchmarks"
NEW = "benchmarks.tasks.refresh_public_benchmarks"


def rename(apps, schema_editor, old=OLD, new=NEW):
    apps.get_model("django_celery_beat", "PeriodicTask").objects.filter(task=old).update(task=new)


def unrename(apps, schema_editor):
    rename(apps, schema_editor, old=NEW, new=OLD)


class Migration(migrations.Migration):
    dependencies = [
        ("benchmarks", "0005_catalog_id_allows_dots"),
        ("django_celery_beat", "0001_initial"),
    ]

    operations = [migrations.RunPython(rename, unrename)]
