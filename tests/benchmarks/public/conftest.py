"""Fixtures of the public benchmark tests (their factories: tests/helpers/network.py).

Every test gets an empty cache of its own (a fresh key prefix), so a snapshot cached by one test
is never served to another, on locmem and on a shared Redis alike.
"""

from __future__ import annotations

import uuid

import pytest

from tests.helpers.network import Network, build_network


@pytest.fixture(autouse=True)
def _fresh_cache(settings):
    settings.CACHES = {
        "default": {**settings.CACHES["default"], "KEY_PREFIX": f"pub-{uuid.uuid4().hex[:12]}"}
    }


@pytest.fixture
def network(db) -> Network:
    return build_network()
