"""The moved models' tables take accounts_* names; their content types follow them, so the admin's
permissions and history keep pointing at the same rows."""

from django.db import migrations

MODELS = ("team", "membership", "invitation", "apitoken")


def move_content_types(apps, schema_editor):
    content_type = apps.get_model("contenttypes", "ContentType")
    for model in MODELS:
        if content_type.objects.filter(app_label="scans", model=model).exists():
            content_type.objects.filter(app_label="accounts", model=model).delete()
            content_type.objects.filter(app_label="scans", model=model).update(app_label="accounts")


def back(apps, schema_editor):
    content_type = apps.get_model("contenttypes", "ContentType")
    content_type.objects.filter(app_label="accounts", model__in=MODELS).update(app_label="scans")


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0001_initial"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("scans", "0008_accounts_models_moved"),
        ("benchmarks", "0004_team_moved_to_accounts"),
    ]

    operations = [
        *[migrations.AlterModelTable(name=model, table=None) for model in MODELS],
        migrations.RunPython(move_content_types, back),
    ]
