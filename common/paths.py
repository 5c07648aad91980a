"""Where the project is and where it keeps local state, for settings and the embedded services.

`var/` holds generated keys, the embedded PostgreSQL and broker, and collected static files;
TOKVERA_VAR_DIR moves it (tests use a fresh one for a fresh-checkout layout)."""

from __future__ import annotations

import os
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("TOKVERA_VAR_DIR") or BASE_DIR / "var").resolve()
