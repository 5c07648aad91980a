"""What the site will do for a team: the most endpoints one team may have
(TEAM_MAX_ENDPOINTS, checked by scans/endpoints/service.py whichever way an endpoint is made)
and what one scan may ask of our workers as a whole (each field's own maximum is its row in
profile_fields.py).

Each endpoint can be scanned or pushed into, so the cap bounds what one team (or one leaked
read-write token) can make the site do. It is checked before saving, not under a lock: two
creations racing at the cap may both pass it, so a team may end one or two above it.
"""

from __future__ import annotations

import os
from datetime import timedelta

from django.conf import settings

from scans.models import Endpoint

DEFAULT_TEAM_MAX_ENDPOINTS = 500

# Our workers must not become anyone's load generator.
SITE_MAX_LEVEL = 256


SITE_MAX_LEVELS = 8


SITE_MAX_REQUESTS_PER_SCAN = 2000


SITE_MAX_SCAN_DURATION = timedelta(hours=2)


# The tokens a whole scan may send and ask for (requests × (prompt + reply), warm-up included).
SITE_MAX_TOKENS_PER_SCAN = 4_000_000


# A load dataset: JSONL, as `tokvera scan --dataset` reads it, at most this big. A dataset
# prompt counts as its UTF-8 bytes ÷ DATASET_BYTES_PER_TOKEN tokens (an upper bound for prose)
# against the per-request and per-scan limits: the site has no tokenizer.
SITE_MAX_DATASET_BYTES = 5 * 1024 * 1024


SITE_MAX_DATASET_PROMPTS = 10_000


DATASET_BYTES_PER_TOKEN = 3


# Built-in prompts are short; this is what one counts for against the per-scan limit.
BUILTIN_PROMPT_TOKENS = 64


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
