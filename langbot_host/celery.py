"""The Celery application of the host.

Tasks only carry ids and wake workers; the database owns every run's state (DESIGN §4), so results
are ignored, tasks are acknowledged late and each worker process prefetches a single message.
"""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "langbot_host.settings")

app = Celery("langbot_host")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
