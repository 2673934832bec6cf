"""The Celery app's configuration, as a worker reads it from Django's `CELERY_*` settings."""

from __future__ import annotations

import warnings

from django.conf import settings

from langbot_host.celery import app


def test_the_worker_gets_every_celery_setting_and_no_deprecation_warning():
    # The worker's start-up check: a namespaced dict made four settings look like Celery 3 names and the
    # worker logged deprecation warnings (and "please run celery upgrade") at every start.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        app.conf.maybe_warn_deprecated_settings()

    assert [str(w.message) for w in caught] == []
    assert app.conf.task_serializer == settings.CELERY_TASK_SERIALIZER
    assert app.conf.task_acks_late is settings.CELERY_TASK_ACKS_LATE is True
    assert app.conf.worker_prefetch_multiplier == settings.CELERY_WORKER_PREFETCH_MULTIPLIER
    assert app.conf.broker_url == settings.CELERY_BROKER_URL
    assert set(app.conf.beat_schedule) == set(settings.CELERY_BEAT_SCHEDULE)
