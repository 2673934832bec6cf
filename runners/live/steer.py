"""How a message steered into a running run (the `steer` concurrency policy) reaches the worker that holds
the run: one Redis pub/sub channel beside the cancel channel (`runners.live.cancel`).

The web process publishes `{"run_id", "event_id"}` after it has committed the event into
`Run.input_events`; the worker holding the run reads the event and hands its input to the runtime. The
database row is the record of what the run was given.
"""

from __future__ import annotations

import json
import logging

import redis

from runners.live.cancel import _redis_client, cancel_channel

logger = logging.getLogger(__name__)


def steer_channel() -> str:
    return f"{cancel_channel()}:input"


def steer_notify(*, run_id: str, event_pk: int) -> None:
    """Tell the worker holding `run_id` that event `event_pk` is more input for it. Best effort."""
    try:
        _redis_client().publish(steer_channel(), json.dumps({"run_id": run_id, "event_pk": event_pk}))
    except redis.RedisError:
        logger.warning("input for run %s not published", run_id, exc_info=True)
