"""Liveness between graded scans: every scheduled endpoint is probed (the scan's preflight
alone, no load) every `probe_interval_s` from each of its locations.

- dispatch.py: the beat's pass, which endpoints are due, skipping an origin while its graded
  scan runs and an endpoint whose scans a maintenance window pauses; one task per location.
- record.py: a batch of results stored (each probe, its hour, the location's standing), the
  confirmation (`confirm_after` results in a row, both ways) and the alerts.
- verdict.py: the quorum across locations (down only when a majority confirms it).
"""
