"""The scan pipeline's one way around tenancy (accounts.tenancy), named once.

The beat (due endpoints, sending queued scans), the reaper and the worker and task steps that
start from an id taken off our own queue serve every team at once: no team is known there until
the row is read. They read through the managers below; once a scan or endpoint is loaded its
team is known, and the code goes on with `.for_team()`.
"""

from __future__ import annotations

from scans.models import Endpoint, PushedReportBody, Scan

ALL_ENDPOINTS = Endpoint.dangerously_unscoped  # the beat's due endpoints, and ids off our queues
ALL_SCANS = Scan.dangerously_unscoped  # beat, reaper and worker steps: a scan id names no team
ALL_PUSHED_BODIES = PushedReportBody.dangerously_unscoped  # the reaper: bodies of settled pushes
