"""The site as a WSGI application (gunicorn tokvera_site.wsgi).

Host heartbeats, and well-formed lease and complete calls, are answered in front of Django's
middleware (benchmarks/host_wsgi.py); everything else goes through Django. (Django's test
client calls Django itself, so there every host call reaches its view, which answers alike.)
"""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tokvera_site.settings")
django_application = get_wsgi_application()
# The URLconf now, not on each process's first request through Django (which host calls
# answered in front of it may make late): a mistake in it stops the start, not a request.
from django.urls import get_resolver  # noqa: E402

get_resolver().url_patterns  # noqa: B018 - loading it is the point

from benchmarks.network.host_wsgi import HostFastPath  # noqa: E402 - needs django.setup()

application = HostFastPath(django_application)
