"""The working context of one model call, assembled from fences in the style of linnkit's context
manager: every piece of context that is not the conversation itself (the summary checkpoint, retrieved
knowledge, attachment references, notices) is an injection of a declared fence kind, and the kind — not
the code that produced the content — decides where it goes, in which role, for how long and how much of
the budget it may take.

A fence kind has:
- `role`: `system` or `user` (the chat role the formatted injection is sent as);
- `placement`: `after-system` (right after the system prompt), `before-current-user` or
  `after-current-user` (around the message being answered);
- `lifetime`: `turn-only` injections belong to the turn (run) that made them and are stripped from any
  later turn; `persisted` ones are carried from turn to turn (the runner keeps them in conversation state);
- `must_keep`: never dropped to fit the budget (persisted facts such as the summary);
- `max_budget_fraction`: the most of the context budget its content may take; longer content is cut with
  a marker.

The formatter of a kind owns its tag (`<knowledge-context …>…</knowledge-context>`); nothing else writes
tags into prompts. When the whole context does not fit, history goes first (oldest first), then the
injections that are not must-keep (latest placement first); the system prompt, must-keep injections and
the current user message always stay.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal
from xml.sax.saxutils import quoteattr

from langbot_local_agent.budget import TokenCounter, truncate_to_tokens

Role = Literal["system", "user"]
Placement = Literal["after-system", "before-current-user", "after-current-user"]
Lifetime = Literal["turn-only", "persisted"]

PLACEMENTS: tuple[Placement, ...] = ("after-system", "before-current-user", "after-current-user")
_KIND = re.compile(r"^[a-z][a-z0-9]*(?:-[a-z0-9]+)*$")


class FenceError(ValueError):
    """A fence kind declared wrongly, or an injection of an undeclared kind."""


@dataclass(frozen=True)
class FenceKind:
    kind: str
    role: Role
    placement: Placement
    lifetime: Lifetime
    must_keep: bool = False
    max_budget_fraction: float | None = None

    def format(self, content: str, attrs: Mapping[str, str]) -> str:
        attributes = "".join(f" {name}={quoteattr(str(value))}" for name, value in attrs.items())
        return f"<{self.kind}{attributes}>\n{content}\n</{self.kind}>"


@dataclass(frozen=True)
class FenceInjection:
    kind: str
    content: str
    attrs: Mapping[str, str] = field(default_factory=dict)
    turn: str = ""
    """The turn (run id) that made the injection; turn-only injections of other turns are stripped."""

    def to_state(self) -> dict[str, Any]:
        return {"kind": self.kind, "content": self.content, "attrs": dict(self.attrs), "turn": self.turn}

    @classmethod
    def from_state(cls, data: Any) -> FenceInjection | None:
        if not isinstance(data, dict) or not isinstance(data.get("kind"), str):
            return None
        raw_attrs = data.get("attrs")
        attrs: dict[Any, Any] = raw_attrs if isinstance(raw_attrs, dict) else {}
        return cls(
            kind=data["kind"],
            content=str(data.get("content") or ""),
            attrs={str(k): str(v) for k, v in attrs.items()},
            turn=str(data.get("turn") or ""),
        )


class FenceRegistry:
    def __init__(self, kinds: Iterable[FenceKind]) -> None:
        self._kinds: dict[str, FenceKind] = {}
        for kind in kinds:
            if not _KIND.match(kind.kind):
                raise FenceError(f"fence kind {kind.kind!r} must be kebab-case")
            if kind.kind in self._kinds:
                raise FenceError(f"fence kind {kind.kind!r} is declared twice")
            if kind.placement not in PLACEMENTS:
                raise FenceError(f"fence kind {kind.kind!r} has an unknown placement {kind.placement!r}")
            if kind.max_budget_fraction is not None and not 0 < kind.max_budget_fraction <= 1:
                raise FenceError(f"fence kind {kind.kind!r}: max_budget_fraction must be in (0, 1]")
            self._kinds[kind.kind] = kind

    def get(self, kind: str) -> FenceKind:
        try:
            return self._kinds[kind]
        except KeyError:
            raise FenceError(f"no fence kind {kind!r} is declared") from None

    def __contains__(self, kind: object) -> bool:
        return kind in self._kinds


# The local-agent's fence kinds.
SUMMARY = "conversation-summary"
KNOWLEDGE = "knowledge-context"
ATTACHMENTS = "attachment-refs"
NOTICE = "runner-notice"
MEMORY = "person-memory"

LOCAL_AGENT_FENCES = FenceRegistry(
    [
        FenceKind(SUMMARY, "system", "after-system", "persisted", must_keep=True, max_budget_fraction=0.25),
        FenceKind(KNOWLEDGE, "user", "before-current-user", "turn-only", max_budget_fraction=0.4),
        FenceKind(ATTACHMENTS, "user", "after-current-user", "turn-only", max_budget_fraction=0.05),
        FenceKind(NOTICE, "system", "after-current-user", "turn-only", must_keep=True, max_budget_fraction=0.05),
        FenceKind(MEMORY, "system", "after-system", "turn-only", max_budget_fraction=0.1),
    ]
)


def injections_for_turn(
    injections: Iterable[FenceInjection], registry: FenceRegistry, turn: str
) -> list[FenceInjection]:
    """The injections that live in `turn`: persisted ones, and turn-only ones made by this turn."""
    return [i for i in injections if registry.get(i.kind).lifetime == "persisted" or i.turn == turn]


def injections_to_persist(injections: Iterable[FenceInjection], registry: FenceRegistry) -> list[FenceInjection]:
    return [i for i in injections if registry.get(i.kind).lifetime == "persisted"]


@dataclass
class AssembledContext:
    messages: list[dict[str, Any]]
    tokens: int
    dropped_history: int = 0
    """History messages left out to fit (oldest first)."""
    dropped_fences: list[str] = field(default_factory=list)
    """Kinds of injections left out to fit."""
    truncated_fences: list[str] = field(default_factory=list)


@dataclass
class _Part:
    message: dict[str, Any]
    tokens: int
    kind: str | None = None
    must_keep: bool = False


def context_assemble(
    *,
    registry: FenceRegistry,
    system: Sequence[dict[str, Any]],
    history: Sequence[dict[str, Any]],
    current_user: dict[str, Any],
    injections: Sequence[FenceInjection],
    turn: str,
    budget_tokens: int,
    counter: TokenCounter,
) -> AssembledContext:
    """The messages of one model call within `budget_tokens` (see the module docstring for the rules)."""
    truncated: list[str] = []
    placed: dict[Placement, list[_Part]] = {p: [] for p in PLACEMENTS}
    for injection in injections_for_turn(injections, registry, turn):
        kind = registry.get(injection.kind)
        content = injection.content
        if kind.max_budget_fraction is not None:
            cap = max(1, int(budget_tokens * kind.max_budget_fraction))
            if counter.text(content) > cap:
                content = truncate_to_tokens(content, int(cap / counter.ratio))
                truncated.append(kind.kind)
        message = {"role": kind.role, "content": kind.format(content, injection.attrs)}
        placed[kind.placement].append(_Part(message, counter.message(message), kind.kind, kind.must_keep))

    fixed = [_Part(m, counter.message(m), must_keep=True) for m in system]
    current = _Part(current_user, counter.message(current_user), must_keep=True)
    past = [_Part(m, counter.message(m)) for m in history]

    def total() -> int:
        parts = [*fixed, *past, current, *(p for group in placed.values() for p in group)]
        return sum(p.tokens for p in parts)

    dropped_history = 0
    # History goes first, oldest first — but an assistant's tool calls never lose their results.
    while total() > budget_tokens and past:
        past.pop(0)
        dropped_history += 1
        while past and past[0].message.get("role") == "tool":
            past.pop(0)
            dropped_history += 1
    dropped: list[str] = []
    for placement in reversed(PLACEMENTS):
        group = placed[placement]
        for part in reversed(list(group)):
            if total() <= budget_tokens:
                break
            if not part.must_keep:
                group.remove(part)
                dropped.append(part.kind or "")

    ordered = [
        *fixed,
        *placed["after-system"],
        *past,
        *placed["before-current-user"],
        current,
        *placed["after-current-user"],
    ]
    return AssembledContext(
        messages=[p.message for p in ordered],
        tokens=sum(p.tokens for p in ordered),
        dropped_history=dropped_history,
        dropped_fences=dropped,
        truncated_fences=truncated,
    )
