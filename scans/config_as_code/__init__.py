"""Configuration as code: a team's endpoints, channels, maintenance windows and status page as
one YAML file, applied with `tokvera apply` and written with `tokvera export` (docs/config-as-code.md).

This package is the client's half and imports no Django (the `tokvera` command loads it):
the file's shape and its secrets (document), the plan as people read it (plan), the HTTP
calls (client) and the two subcommands. The site's half, which validates a whole file with
the API's own serializers and applies it in one transaction, is scans/api/config.py.
"""
