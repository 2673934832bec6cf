"""The port the context build asks for the person of a run's actor through (README "People").

The people app stands above the runners (its export and erasure read and redact runs), so it installs its
lookup here at start-up; without it a run simply names no person.
"""

from __future__ import annotations

from typing import Protocol

from foundation.ports import Port


class PersonLookup(Protocol):
    def __call__(
        self, *, workspace_id: int, channel: str, actor_type: str, actor_id: str, actor_name: str
    ) -> tuple[str, str] | None:
        """(person id, display name) of the actor, made on first sight; None when it has none."""
        ...


person_port: Port[PersonLookup] = Port("person lookup")


def person_of_event_actor(*, workspace_id: int, channel: str, actor: object) -> tuple[str, str] | None:
    """The person of an event's actor dict, or None (no actor id, or no people app installed)."""
    lookup = person_port.installed
    if lookup is None or not isinstance(actor, dict) or not actor.get("actor_id"):
        return None
    return lookup(
        workspace_id=workspace_id,
        channel=channel,
        actor_type=str(actor.get("actor_type") or "user"),
        actor_id=str(actor["actor_id"]),
        actor_name=str(actor.get("actor_name") or ""),
    )
