"""The host-call server under the name it had while it answered heartbeats only, for deployed
configurations that still start `uvicorn tokvera_site.heartbeats_asgi:application`: the same
application as tokvera_site/host_calls_asgi.py, which now also answers the job calls."""

from tokvera_site.host_calls_asgi import application

__all__ = ["application"]
