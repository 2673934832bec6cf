"""How a message steered into a running run (the `steer` concurrency policy) reaches the worker that holds
the run: one Redis pub/sub channel beside the cancel channel (`runners.live.cancel`).

The web process publishes `{"run_id", "event_pk"}` after it has committed the event into
`Run.input_events`; every worker listens (`SteerListener`) and the one holding the run reads the event and
hands its input to the runtime (`runners.orchestrator.steering`). A lost message is not fatal: the next one
for the run, and the run's end, deliver (or give a run of their own to) every event recorded on it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

import redis

from runners.live.cancel import CancelListener, _redis_client, cancel_channel

logger = logging.getLogger(__name__)


def steer_channel() -> str:
    return f"{cancel_channel()}:input"


def steer_notify(*, run_id: str, event_pk: int) -> None:
    """Tell the worker holding `run_id` that event `event_pk` is more input for it. Best effort."""
    try:
        _redis_client().publish(steer_channel(), json.dumps({"run_id": run_id, "event_pk": event_pk}))
    except redis.RedisError:
        logger.warning("input for run %s not published", run_id, exc_info=True)


class SteerListener(CancelListener):
    """Subscribes to the steer channel on the worker's loop and calls `on_input(run_id, event_pk)`."""

    task_name = "run-steer-listener"

    def __init__(self, on_input: Callable[[str, int], None]) -> None:
        super().__init__(lambda run_id, reason: None)
        self._on_input = on_input

    def channel(self) -> str:
        return steer_channel()

    def _dispatch(self, raw: object) -> None:
        try:
            payload = json.loads(raw if isinstance(raw, str | bytes) else b"")
            run_id, event_pk = str(payload["run_id"]), int(payload["event_pk"])
        except (ValueError, KeyError, TypeError):
            logger.warning("ignored a malformed steer message: %r", raw)
            return
        self._on_input(run_id, event_pk)
