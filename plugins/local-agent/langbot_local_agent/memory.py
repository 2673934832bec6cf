"""The person memory: short facts a user asked the agent to remember, kept in the host's `person` state scope
so they follow the person across channels (the host links a Telegram user, a Slack user and a web-chat user
into one person), each with the turn (run id) it came from.

On only when the binding's config sets `person-memory` and the binding's state policy allows the `person`
scope, and only for a run whose actor the host linked to a person (`actor.metadata.person_id`).

A fact is what follows "remember that …" / "remember: …" (or "记住 …") at the start of the user's message;
"forget everything" / "忘掉所有" clears the memory. At most `MEMORY_FACTS_MAX` facts of at most
`MEMORY_FACT_CHARS` characters are kept, the oldest dropped first; the model sees them in a fence after
the system prompt.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any

from langbot_sdk.protocol import PERSON_ID_KEY, AgentAPIException, AgentRunContext, StateScope
from langbot_sdk.proxy import AgentRunAPIProxy

MEMORY_KEY = "memory"
MEMORY_FACTS_MAX = 20
MEMORY_FACT_CHARS = 500
_REMEMBER = re.compile(r"^\s*(?:please\s+)?remember(?:\s+that)?\s*[:,]?\s*(?P<fact>.+)$", re.IGNORECASE | re.DOTALL)
_REMEMBER_ZH = re.compile(r"^\s*(?:请)?记住[:：,，]?\s*(?P<fact>.+)$", re.DOTALL)
_FORGET = re.compile(r"^\s*(?:please\s+)?forget\s+everything\b|^\s*(?:请)?忘[掉记]所有", re.IGNORECASE)


@dataclass(frozen=True)
class Fact:
    fact: str
    turn: str
    at: float

    def to_state(self) -> dict[str, Any]:
        return {"fact": self.fact, "turn": self.turn, "at": self.at}

    @classmethod
    def from_state(cls, data: Any) -> Fact | None:
        if not isinstance(data, dict) or not isinstance(data.get("fact"), str):
            return None
        at = data.get("at")
        return cls(str(data["fact"]), str(data.get("turn") or ""), float(at) if isinstance(at, int | float) else 0.0)


def memory_usable(ctx: AgentRunContext, enabled: bool) -> bool:
    state = ctx.resources.state
    if not enabled or not (ctx.context.available_apis.state or state.enabled):
        return False
    if state.scopes and StateScope.PERSON not in state.scopes:
        return False
    return bool(ctx.actor and ctx.actor.metadata.get(PERSON_ID_KEY))


def remembered_fact(text: str | None) -> str | None:
    """The fact a message asks to remember, or None."""
    if not text:
        return None
    match = _REMEMBER.match(text) or _REMEMBER_ZH.match(text)
    if match is None:
        return None
    fact = " ".join(match.group("fact").split())[:MEMORY_FACT_CHARS]
    return fact or None


def forgets(text: str | None) -> bool:
    return bool(text and _FORGET.match(text))


async def memory_load(api: AgentRunAPIProxy) -> list[Fact]:
    try:
        got = await api.state.get(StateScope.PERSON, MEMORY_KEY)
    except AgentAPIException:
        return []
    raw = got.value.get("facts") if got.found and isinstance(got.value, dict) else None
    facts = [f for item in raw or [] if (f := Fact.from_state(item)) is not None]
    return facts[-MEMORY_FACTS_MAX:]


def memory_value(facts: list[Fact]) -> dict[str, Any]:
    return {"facts": [f.to_state() for f in facts[-MEMORY_FACTS_MAX:]]}


async def memory_update(
    api: AgentRunAPIProxy, ctx: AgentRunContext, facts: list[Fact], text: str | None
) -> list[Fact] | None:
    """Apply what the message asks ("remember …", "forget everything") and store it; the new facts, or None
    when the message asks nothing of the memory (or the write was refused)."""
    if forgets(text):
        updated: list[Fact] = []
    elif (fact := remembered_fact(text)) is not None:
        updated = [f for f in facts if f.fact != fact] + [Fact(fact, ctx.run_id, time.time())]
        updated = updated[-MEMORY_FACTS_MAX:]
    else:
        return None
    try:
        await api.state.set(StateScope.PERSON, MEMORY_KEY, memory_value(updated))
    except AgentAPIException:
        return None
    return updated


def memory_fence_content(facts: list[Fact]) -> str:
    lines = "\n".join(f"- {f.fact}" for f in facts)
    return f"What this user asked you to remember (from earlier conversations, on any channel):\n{lines}"
