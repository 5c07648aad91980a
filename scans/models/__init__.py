"""The app's models, one module per feature: endpoints, scans (and their check results), running
(pushed report bodies, proof turns, origin locks), history (rollups), notify (channels, alerts,
deliveries), status pages (with maintenance windows). Every model and every name a migration
names (`scans.models.new_badge_key`, …) is imported here: `from scans.models import X` is the
one way in, and the app, its tables and its migrations are unchanged by the split.

Every team-owned model uses TeamScopedManager as `objects` (see accounts/tenancy.py): reading it
without saying whose rows you want raises, so a view cannot leak another team's data by
accident. Code that serves every team (the beat, the reaper, id-only worker steps) reads
through scans/system_wide.py.
"""

from scans.models.endpoints import (
    GRADE_CHOICES,
    MAX_INTERVAL_MINUTES,
    MIN_INTERVAL_MINUTES,
    Endpoint,
    EndpointMode,
    new_badge_key,
)
from scans.models.history import CheckRollup, RollupPeriod, RollupWatermark, ScanRollup
from scans.models.incidents import (
    Incident,
    IncidentProblem,
    IncidentStatus,
    IncidentUpdate,
    TimelineKind,
)
from scans.models.notify import AlertEvent, ChannelKind, Delivery, DeliveryStatus, NotificationChannel
from scans.models.probes import LivenessState, ProbeHour, ProbeResult
from scans.models.running import OriginLock, ProofTurn, PushedReportBody
from scans.models.scans import (
    CapacityOutcome,
    CheckResult,
    Scan,
    ScanStatus,
    ScanTrigger,
    default_scan_location,
)
from scans.models.status_pages import (
    MaintenanceKind,
    MaintenanceWindow,
    StatusPage,
    StatusPageEndpoint,
    StatusPageSubscriber,
    new_status_page_slug,
)

__all__ = [
    "GRADE_CHOICES",
    "MAX_INTERVAL_MINUTES",
    "MIN_INTERVAL_MINUTES",
    "AlertEvent",
    "CapacityOutcome",
    "ChannelKind",
    "CheckResult",
    "CheckRollup",
    "Delivery",
    "DeliveryStatus",
    "Endpoint",
    "EndpointMode",
    "Incident",
    "IncidentProblem",
    "IncidentStatus",
    "IncidentUpdate",
    "LivenessState",
    "MaintenanceKind",
    "MaintenanceWindow",
    "NotificationChannel",
    "OriginLock",
    "ProbeHour",
    "ProbeResult",
    "ProofTurn",
    "PushedReportBody",
    "RollupPeriod",
    "RollupWatermark",
    "Scan",
    "ScanRollup",
    "ScanStatus",
    "ScanTrigger",
    "StatusPage",
    "StatusPageEndpoint",
    "StatusPageSubscriber",
    "TimelineKind",
    "default_scan_location",
    "new_badge_key",
    "new_status_page_slug",
]
