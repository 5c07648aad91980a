"""Accounts made before sign-up existed (by an operator's createteam or an invitation, whose
link reached the mailbox) keep logging in: their email is recorded as verified, or allauth's
mandatory verification would stop them at the login (accounts/identity.py)."""

from django.conf import settings
from django.db import migrations


def vouch_for_existing_emails(apps, schema_editor):
    User = apps.get_model(*settings.AUTH_USER_MODEL.split("."))
    EmailAddress = apps.get_model("account", "EmailAddress")
    taken = {e.lower() for e in EmailAddress.objects.values_list("email", flat=True)}
    rows = []
    for user_id, email in User.objects.exclude(email="").values_list("id", "email").order_by("id"):
        if email.lower() in taken or EmailAddress.objects.filter(user_id=user_id).exists():
            continue  # one address per account, and one account per address
        taken.add(email.lower())
        rows.append(EmailAddress(user_id=user_id, email=email.lower(), verified=True, primary=True))
    EmailAddress.objects.bulk_create(rows, batch_size=1000)


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0003_profile_and_team_requires_two_factor"),
        ("account", "0009_emailaddress_unique_primary_email"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [migrations.RunPython(vouch_for_existing_emails, migrations.RunPython.noop)]
