"""Where the checkout is: ROOT, the repository's top (manage.py, docs/, Procfile.dev). Tests run
processes from it and read the files the site ships from it."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
