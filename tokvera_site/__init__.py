"""Tokvera site: the Django project package."""

from tokvera_site.celery import app as celery_app

__all__ = ["celery_app"]
