"""The site's settings for test workers whose scans heartbeat every second, so a test sees a
dead worker's scan reaped in seconds instead of minutes (the thresholds in docs/operations.md
are the production ones)."""

from tokvera_site.settings import *  # noqa: F403

SCAN_HEARTBEAT_S = 1
SCAN_STALE_AFTER_S = 8
SCAN_ORIGIN_BUSY_RETRY_S = 1
SCAN_STORE_RETRY_S = 120
