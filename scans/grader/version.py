"""The scoring version, alone in a module with no imports.

`scans.grader.scoring` re-exports it (its one definition is here). `tokvera --version` reads this
file without importing the `scans.grader` package, whose __init__ loads the whole scanner.
"""

SCORING_VERSION = "1.0.0"
