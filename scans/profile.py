"""An endpoint's scan profile: the engine's plan for it, the site's limits on what it may
ask of our workers, and how long it can run at worst (which sets its deadline)."""

from __future__ import annotations

from datetime import timedelta

from accounts import encryption
from scans.grader.plan import DEFAULT_LEVELS, PlanError, ScanPlan, default_requests
from scans.models import Endpoint


def worst_case_duration(endpoint: Endpoint) -> timedelta:
    """An upper bound on how long the scan may run: every request of every level timing out
    one after another, at that level's concurrency."""
    seconds = 60.0  # probes (metrics, GPU) and bookkeeping
    for level in endpoint.levels or [1]:
        count = endpoint.requests_per_level or default_requests(level)
        waves = -(-count // level)
        seconds += waves * endpoint.timeout_s
    return timedelta(seconds=seconds)


# What the site will run for a team: our workers must not become anyone's load generator.
SITE_MAX_LEVEL = 256


SITE_MAX_LEVELS = 8


SITE_MAX_REQUESTS_PER_SCAN = 2000


SITE_MAX_TIMEOUT_S = 300.0


SITE_MAX_TOKENS = 4096


SITE_MAX_SCAN_DURATION = timedelta(hours=2)


def validate_profile(endpoint: Endpoint) -> None:
    """Raise PlanError (one line) when the endpoint's scan profile cannot run here: the
    engine's own rules, then the site's limits. Forms and the API both call this."""
    plan_for(endpoint).validate()
    levels = endpoint.levels or [1]
    if len(levels) > SITE_MAX_LEVELS:
        raise PlanError(f"at most {SITE_MAX_LEVELS} concurrency levels")
    if max(levels) > SITE_MAX_LEVEL:
        raise PlanError(f"a concurrency level can be at most {SITE_MAX_LEVEL} here")
    total = sum(endpoint.requests_per_level or default_requests(level) for level in levels)
    if total > SITE_MAX_REQUESTS_PER_SCAN:
        raise PlanError(f"{total} requests per scan; at most {SITE_MAX_REQUESTS_PER_SCAN} here")
    if endpoint.timeout_s > SITE_MAX_TIMEOUT_S:
        raise PlanError(f"the timeout can be at most {SITE_MAX_TIMEOUT_S:g} s here")
    if endpoint.max_tokens > SITE_MAX_TOKENS:
        raise PlanError(f"max tokens can be at most {SITE_MAX_TOKENS} here")
    worst = worst_case_duration(endpoint)
    if worst > SITE_MAX_SCAN_DURATION:
        hours = worst.total_seconds() / 3600
        raise PlanError(f"if every request timed out this scan would run {hours:.1f} h; "
                        f"lower the timeout or the requests (at most 2 h)")


def plan_for(endpoint: Endpoint):
    """The engine's plan for an endpoint (the API key decrypted in memory only)."""
    return ScanPlan(
        base_url=endpoint.base_url,
        model=endpoint.model,
        levels=tuple(endpoint.levels or DEFAULT_LEVELS),
        requests=endpoint.requests_per_level,
        max_tokens=endpoint.max_tokens,
        timeout_s=endpoint.timeout_s,
        api_key=encryption.decrypt(endpoint.api_key_encrypted) or None,
        use_nvidia_smi=False,  # the site's workers never sample their own GPUs
        price_input_per_mtok=endpoint.price_input_per_mtok,
        price_output_per_mtok=endpoint.price_output_per_mtok,
    )
