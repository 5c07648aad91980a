"""Helpers every app uses: rate limits, cache-outage fallback, the stale-while-rebuild cache,
JSON body parsing, error answers, failed-auth counting, client addresses, pagination, mail,
log filters, the periodic-task mechanism. This package imports no app (the `layers` contract
in pyproject.toml); what the site wires together lives in tokvera_site."""
