"""The site as a WSGI application (gunicorn tokvera_site.wsgi).

Host heartbeats are answered in front of Django's middleware (benchmarks/heartbeat_wsgi.py);
everything else goes through Django. (Django's test client calls Django itself, so there a
heartbeat reaches the view, which answers with the same function.)
"""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tokvera_site.settings")
django_application = get_wsgi_application()

from benchmarks.heartbeat_wsgi import HeartbeatFastPath  # noqa: E402 - needs django.setup()

application = HeartbeatFastPath(django_application)
