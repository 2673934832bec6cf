"""LangBot Host project package: settings, URL and ASGI wiring, the Celery app and shared helpers."""

from langbot_host.celery import app as celery_app

__all__ = ["celery_app"]
