"""Tokvera site: the Django project package.

Importing it loads nothing: the `tokvera` command (tokvera_site.cli) starts without
Django or Celery. The Celery app, tokvera_site.celery, is loaded by the site's app config
(tokvera_site/apps.py) in every Django process, and found by `celery -A tokvera_site` on its own.
"""
