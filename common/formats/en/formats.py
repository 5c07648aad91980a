"""How a date or time reads wherever a template or the admin shows one without a format of its
own: the site's one form, "2026-12-02 06:08 UTC", in the viewer's zone and naming it (instead
of Django's English "Dec. 2, 2026, 6:08 a.m." beside the pages' own). Input formats stay
Django's. Used through FORMAT_MODULE_PATH (tokvera_site/settings.py)."""

DATE_FORMAT = "Y-m-d"
DATETIME_FORMAT = "Y-m-d H:i T"
SHORT_DATE_FORMAT = "Y-m-d"
SHORT_DATETIME_FORMAT = "Y-m-d H:i T"
TIME_FORMAT = "H:i"
