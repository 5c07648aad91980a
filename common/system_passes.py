"""One row at a time in a pass over every team's rows (the beat's and the reaper's tasks).

A periodic task that serves every team must not let one row stop it: a row that fails is
logged with what it is, its own writes are rolled back (it is tried again at the next pass), and
the pass goes on with the others. A database that is unreachable is no row's fault: that ends
the pass, as before, and the next one starts over.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext

from django.db import InterfaceError, OperationalError, transaction

__all__ = ["PASS_ENDING_ERRORS", "one_row"]

# The connection is gone (or the server is going away): every other row would fail the same way.
PASS_ENDING_ERRORS = (OperationalError, InterfaceError)


@contextmanager
def one_row(log: logging.Logger, what: str, *, atomic: bool = True) -> Iterator[None]:
    """Run the body in a transaction of its own (a savepoint inside one; `atomic=False` for a
    body whose writes are in transactions of their own already); an error other than a lost
    database is logged as `what` ("endpoint 12 of team 3") and does not propagate."""
    try:
        with transaction.atomic() if atomic else nullcontext():
            yield
    except PASS_ENDING_ERRORS:
        raise
    except Exception:  # noqa: BLE001 - any fault of one row; the pass goes on with the others
        log.exception("%s failed in a periodic pass; the pass went on with the others", what)
