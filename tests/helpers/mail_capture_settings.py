"""The fast scan settings, with every email a real worker sends written to a file under
TOKVERA_TEST_MAIL_DIR (Django's file backend), so a test reads what was sent."""

import os

from tests.helpers.fast_scan_settings import *  # noqa: F403

EMAIL_BACKEND = "django.core.mail.backends.filebased.EmailBackend"
EMAIL_FILE_PATH = os.environ["TOKVERA_TEST_MAIL_DIR"]
