"""The site's settings for a test worker whose mail lands in files (Django's file backend, in
$TOKVERA_TEST_MAIL_DIR), so a test running the worker in another process reads what it sent.
Heartbeats as fast as the scheduling tests' workers."""

import os

from tests.scans.scheduling.fast_scan_settings import *  # noqa: F403

EMAIL_BACKEND = "django.core.mail.backends.filebased.EmailBackend"
EMAIL_FILE_PATH = os.environ["TOKVERA_TEST_MAIL_DIR"]
