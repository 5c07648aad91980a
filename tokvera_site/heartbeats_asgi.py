"""Host heartbeats as an ASGI application, served apart from the site:

    uvicorn tokvera_site.heartbeats_asgi:application --loop uvloop --http httptools

benchmarks/heartbeat_server.py says what it answers and why it is a process of its own.
"""

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tokvera_site.settings")
django.setup()

from benchmarks.network.heartbeat_batches import SteadyWriter, connect_as_django  # noqa: E402
from benchmarks.network.heartbeat_server import HeartbeatApp  # noqa: E402

application = HeartbeatApp(SteadyWriter(connect_as_django()))
