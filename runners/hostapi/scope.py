"""What one run may touch: its scope (workspace, bot, conversation, thread, binding, runner, actor,
subject) and the isolated state keys derived from it (DESIGN §5).

State keys: `conversation:{runner}:{binding}:{conversation}[:{thread}]`, `actor:{runner}:{binding}:{actor}`,
`subject:{runner}:{binding}:{subject}`, `runner:{runner}:{binding}` and `binding:{runner}:{binding}`.
Each part is escaped (`%` and `:`), so a conversation id containing `:` cannot collide with a thread
key; a key longer than the column keeps its readable head and ends in a digest of the whole.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from typing import Any

from langbot_sdk.protocol import StateScope

SCOPE_KEY_MAX_LENGTH = 700


def _part(value: str) -> str:
    return value.replace("%", "%25").replace(":", "%3A")


def _bounded(key: str) -> str:
    if len(key) <= SCOPE_KEY_MAX_LENGTH:
        return key
    digest = hashlib.sha256(key.encode("utf-8")).hexdigest()
    return f"{key[: SCOPE_KEY_MAX_LENGTH - 65]}#{digest}"


@dataclass(frozen=True)
class RunScope:
    workspace_id: int
    workspace: str
    runner_id: str
    binding_id: str
    bot_id: str = ""
    conversation_id: str = ""
    thread_id: str = ""
    actor_id: str = ""
    subject_id: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunScope:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})

    def state_key(self, scope: StateScope | str) -> str | None:
        """The isolated key of `scope` for this run, or None when the run has no such subject (e.g. an
        event without an actor has no actor state)."""
        owner = f"{_part(self.runner_id)}:{_part(self.binding_id)}"
        match StateScope(scope):
            case StateScope.CONVERSATION:
                if not self.conversation_id:
                    return None
                key = f"conversation:{owner}:{_part(self.conversation_id)}"
                if self.thread_id:
                    key += f":{_part(self.thread_id)}"
            case StateScope.ACTOR:
                if not self.actor_id:
                    return None
                key = f"actor:{owner}:{_part(self.actor_id)}"
            case StateScope.SUBJECT:
                if not self.subject_id:
                    return None
                key = f"subject:{owner}:{_part(self.subject_id)}"
            case StateScope.RUNNER:
                key = f"runner:{owner}"
            case StateScope.BINDING:
                key = f"binding:{owner}"
        return _bounded(key)
