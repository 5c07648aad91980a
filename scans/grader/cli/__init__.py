"""The grader's `tokvera` subcommands (scan, regrade, scoring-table, target).

`UsageError` lives here, not in tokvera_site.cli, so the grader and the host agent raise it
without importing the site (the import contracts in pyproject.toml).
"""


class UsageError(Exception):
    """Bad input from the user: printed as one line, exit status 2."""
