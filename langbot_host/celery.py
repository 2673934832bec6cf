"""The Celery application of the host.

Tasks only carry ids and wake workers; the database owns every run's state (docs/architecture.md, "Runs"), so results
are ignored, tasks are acknowledged late and each worker process prefetches a single message.

Runs execute on an asyncio loop inside each worker process (`runners.orchestrator.worker`); the worker
signals below start that loop with the worker and end its runs cleanly when the worker stops. Run
workers with the thread pool, e.g. `celery -A langbot_host worker --pool threads --concurrency 8 -B`:
the task threads only claim runs and hand them to the loop, the loop holds the runs.
"""

import os
from typing import Any

from celery import Celery
from celery.signals import worker_process_init, worker_process_shutdown, worker_ready, worker_shutdown

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "langbot_host.settings")

app = Celery("langbot_host")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@app.on_configure.connect
def _settings_as_dict(sender: Celery, **kwargs: Any) -> None:
    """Give Celery Django's `CELERY_*` settings as a plain dict, read once when it loads its configuration.

    Celery looks up a dozen keys for every task it sends or runs, each under its namespaced and plain
    name. Against the Django settings object every miss is an AttributeError raised through
    `LazySettings`; a dict answers the same lookups in half the time (about a tenth of `delay()`).

    The keys are Celery's own names (`CELERY_TASK_SERIALIZER` -> `task_serializer`), as the namespace
    maps them: in a namespaced dict, four of them read as Celery 3 names and the worker warned about
    deprecated settings at every start.
    """
    from django.conf import settings

    prefix = "CELERY_"
    sender.config_from_object(
        {name[len(prefix) :].lower(): getattr(settings, name) for name in dir(settings) if name.startswith(prefix)}
    )


@worker_ready.connect
def _start_run_loop(sender: Any = None, **kwargs: Any) -> None:
    # Prefork children start their own loop (below); the parent process never runs runs.
    pool = getattr(sender, "pool", None)
    if pool is not None and type(pool).__module__.endswith("prefork"):
        return
    from foundation.process import startup_objects_freeze
    from foundation.tracing import tracing_configure
    from runners.orchestrator.worker import orchestrator_start

    tracing_configure(role="worker")
    orchestrator_start()
    startup_objects_freeze()


@worker_process_init.connect
def _start_child_run_loop(**kwargs: Any) -> None:
    from foundation.process import startup_objects_freeze
    from foundation.tracing import tracing_configure
    from runners.orchestrator.worker import orchestrator_start

    tracing_configure(role="worker")
    orchestrator_start()
    startup_objects_freeze()


@worker_shutdown.connect
@worker_process_shutdown.connect
def _stop_run_loop(**kwargs: Any) -> None:
    from foundation.tracing import tracing_shutdown
    from runners.orchestrator.worker import orchestrator_shutdown

    orchestrator_shutdown()
    tracing_shutdown()  # the last runs' spans are exported before the process ends
