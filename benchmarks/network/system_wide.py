"""The coordinator's one way around tenancy (accounts.tenancy), named once.

Routing, leases, the lease and queue clocks and the EWMA folds serve every team at once: a pass
matches any team's queued job to any operator's host, and a host acts on jobs of buyers it
never learns. No team is known there, so these modules read through the two managers below,
as do the admin (every operator's hosts) and the public snapshot (figures over all of them);
code that knows a team (a buyer's submission, an operator's change to a host) uses
`.for_team()` / `.visible_to()` instead.
"""

from __future__ import annotations

from benchmarks.models import Host, Job

ALL_JOBS = Job.dangerously_unscoped  # every team's jobs: the coordinator routes them all
ALL_HOSTS = Host.dangerously_unscoped  # every operator's hosts: matched across teams by routing
