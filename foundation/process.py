"""Start-up of the host's long-running processes: what daphne (`asgi.py`), a Celery worker (`celery.py`) and
the bench's stand-in web process do once they are ready to serve.

What belongs here: process-wide tuning that must happen after start-up and before the first request or run.
"""

from __future__ import annotations

import gc

from django.conf import settings
from django.urls import get_resolver


def startup_objects_freeze() -> None:
    """Take every object alive after start-up out of the garbage collector's view (`gc.freeze`).

    A started host process holds 150,000-190,000 tracked objects — modules, classes, URL patterns, model
    metadata — that live as long as the process. Every full collection walked all of them with the GIL
    held (about 85 ms in the web process, `bench/gc_pause`; up to 230 ms seen in a busy worker), and every
    stream and request of the process stood still meanwhile. Frozen, they are never walked again: a full
    collection walks only what was allocated since.

    The URL configuration is loaded first, so the view modules the first request would import are frozen
    too; garbage left over from start-up is collected first, so none of it is kept forever.
    """
    if not settings.LANGBOT_GC_FREEZE:
        return
    get_resolver().url_patterns  # noqa: B018 - importing every view module is the point
    gc.collect()
    gc.freeze()
