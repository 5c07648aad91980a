"""The host calls as an ASGI application, served apart from the site:

    uvicorn tokvera_site.host_calls_asgi:application --loop uvloop --http httptools

benchmarks/network/host_call_server.py says what it answers and why it is a process of its own.
"""

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tokvera_site.settings")
django.setup()

from benchmarks.network.heartbeat_batches import SteadyWriter, connect_as_django  # noqa: E402
from benchmarks.network.host_call_server import HostCallApp  # noqa: E402

application = HostCallApp(SteadyWriter(connect_as_django()))
