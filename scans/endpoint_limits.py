"""The most endpoints one team may have (TEAM_MAX_ENDPOINTS), checked on both ways an endpoint
is made: the API (scans/api/endpoints.py) and the new-endpoint page (scans/pages/forms.py).

Each endpoint can be scanned or pushed into, so the cap bounds what one team (or one leaked
read-write token) can make the site do. It is checked before saving, not under a lock: two
creations racing at the cap may both pass it, so a team may end one or two above it.
"""

from __future__ import annotations

import os

from django.conf import settings

from scans.models import Endpoint

DEFAULT_TEAM_MAX_ENDPOINTS = 500


class TooManyEndpoints(Exception):
    def __init__(self, cap: int):
        self.cap = cap
        super().__init__(f"this team already has {cap} endpoints, the most one team may have "
                         f"(TEAM_MAX_ENDPOINTS); delete one before adding another")


def team_max_endpoints() -> int:
    """The Django setting TEAM_MAX_ENDPOINTS, else the environment variable, else 500."""
    value = getattr(settings, "TEAM_MAX_ENDPOINTS", None)
    if value is None:
        value = os.environ.get("TEAM_MAX_ENDPOINTS") or DEFAULT_TEAM_MAX_ENDPOINTS
    return int(value)


def check_room_for_endpoint(team_id: int) -> None:
    """Raise TooManyEndpoints when the team has reached the cap."""
    cap = team_max_endpoints()
    if Endpoint.objects.for_team(team_id).count() >= cap:
        raise TooManyEndpoints(cap)
