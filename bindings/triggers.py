"""A binding's trigger filter: which of the events its scope and event types cover it actually answers.

`TriggerPolicy` is stored on the binding (`AgentBinding.trigger_policy`) like the other policies; the
resolver asks `trigger_check` for every candidate binding, with what the event says about itself in a
`TriggerContext` (built by the gateway). A binding whose filter refuses the event is not a candidate: a
lower-priority binding may answer instead, and an event no binding accepts is recorded as `no_binding`.
The default policy accepts every event but a group message that says it does not address the bot
(`data.mentioned: false`, which no event carried before filters existed), so existing bindings behave as
they always did.

The checks, in this order (LangBot's, so an imported pipeline behaves as it did there):

1. `chat_types`: the event's chat is `group` or `private`. A platform's group, supergroup, channel, guild
   or multi-person chat is a group (`GROUP_CHAT_TYPES`); anything else — a direct message, or an event that
   names no `data.chat_type` (the web chat, most API clients) — is private.
2. Access lists: with `access_mode: deny` a listed chat or sender is refused, with `allow` only they are
   answered. A group chat is listed by its chat id (`data.chat_id`), a private chat by the user's id
   (`actor.actor_id`), a sender anywhere by `access_user_ids`; `*` lists every group or private chat.
3. In a group chat, at least one group rule must hold: the message addresses the bot (`group_mention`;
   an @-mention, a reply to the bot or a command — `data.mentioned`, taken as true when the event does not
   say: the adapters that forward other group messages mark them false), it starts with one of
   `group_prefixes`, or one of `group_patterns` matches at its start. The rules are tried in that order
   and the first that holds decides; a matched prefix is removed from the text the runner gets (with the
   spaces after it) unless `strip_prefix` is off, as LangBot did. With `group_always` every group message
   is answered (the rules then only say which prefix is removed) — on the platforms whose adapter forwards
   group messages that do not address the bot (`data.mentioned: false`).
4. Ignore rules, on that text: a message starting with one of `ignore_prefixes`, or in which one of
   `ignore_patterns` matches anywhere, is not answered — in any chat.

Rate limits (`rate_limit_per_user`, `rate_limit_per_chat`) are not checked here but where an event is
admitted (`gateway.rate_limits`): they count only events this filter accepted.

Patterns are regular expressions of the `regex` package, checked when the policy is saved, at most
`PATTERN_MAX_CHARS` long, and run with a `PATTERN_TIMEOUT_SECONDS` timeout: a pattern that backtracks
catastrophically on some text stops there instead of holding the web process, and the message is then
not answered (a filter that cannot decide refuses).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from functools import lru_cache
from typing import Annotated, Any, Literal

import regex
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

from bindings.policies import RateLimit

logger = logging.getLogger(__name__)

ChatKind = Literal["private", "group"]
CHAT_KINDS: tuple[ChatKind, ...] = ("private", "group")
# Every group-like `data.chat_type` the platform adapters send: Telegram group/supergroup/channel, Lark
# group/topic_group, Discord guild, Slack channel/group (a private channel)/mpim, OneBot group.
GROUP_CHAT_TYPES = frozenset({"group", "supergroup", "channel", "topic_group", "guild", "mpim"})
EVERY_CHAT = "*"

PATTERN_MAX_CHARS = 300
PATTERN_TIMEOUT_SECONDS = 0.05
RULES_MAX = 50
"""At most this many prefixes, patterns or ids per list: the filter runs for every event."""

TriggerText = Annotated[str, StringConstraints(min_length=1, max_length=100)]
TriggerPattern = Annotated[str, StringConstraints(min_length=1, max_length=PATTERN_MAX_CHARS)]
TriggerId = Annotated[str, StringConstraints(min_length=1, max_length=255, strip_whitespace=True)]
RATE_LIMIT_REPLY_MAX_CHARS = 500
RateLimitReply = Annotated[str, StringConstraints(max_length=RATE_LIMIT_REPLY_MAX_CHARS, strip_whitespace=True)]


class TriggerPolicy(BaseModel):
    """Which events of its scope and event types the binding answers (see the module docstring)."""

    model_config = ConfigDict(extra="forbid")

    chat_types: list[ChatKind] = Field(default_factory=lambda: list(CHAT_KINDS), min_length=1, max_length=2)
    """The chats answered (a binding that should answer none is disabled instead)."""
    group_mention: bool = True
    """In a group, a message that addresses the bot (@-mention, reply, command) is answered."""
    group_prefixes: list[TriggerText] = Field(default_factory=list, max_length=RULES_MAX)
    """In a group, a message starting with one of these is answered."""
    group_patterns: list[TriggerPattern] = Field(default_factory=list, max_length=RULES_MAX)
    """In a group, a message one of these regular expressions matches at its start is answered."""
    group_always: bool = False
    """In a group, every message is answered, whether it addresses the bot or not."""
    strip_prefix: bool = True
    """Remove the matched group prefix (and the spaces after it) from the text the runner gets."""
    ignore_prefixes: list[TriggerText] = Field(default_factory=list, max_length=RULES_MAX)
    ignore_patterns: list[TriggerPattern] = Field(default_factory=list, max_length=RULES_MAX)
    """A message one of these matches anywhere is not answered."""
    access_mode: Literal["deny", "allow"] = "deny"
    access_group_chat_ids: list[TriggerId] = Field(default_factory=list, max_length=RULES_MAX)
    access_private_user_ids: list[TriggerId] = Field(default_factory=list, max_length=RULES_MAX)
    access_user_ids: list[TriggerId] = Field(default_factory=list, max_length=RULES_MAX)
    """Senders listed in any chat (`*` is not special here)."""
    rate_limit_per_user: RateLimit | None = None
    """The most events of one sender (on one bot) answered per window; None for no limit."""
    rate_limit_per_chat: RateLimit | None = None
    """The most events of one chat (on one bot) answered per window; None for no limit."""
    rate_limit_reply: RateLimitReply = ""
    """The one reply an over-limit sender or chat gets per window; empty for the default (translated) text."""

    @field_validator("group_patterns", "ignore_patterns")
    @classmethod
    def _compiles(cls, value: list[str]) -> list[str]:
        for index, pattern in enumerate(value):
            try:
                regex.compile(pattern)
            except (regex.error, ValueError) as exc:
                raise ValueError(f"pattern {index} is not a valid regular expression: {exc}") from None
        return value

    @field_validator("chat_types")
    @classmethod
    def _dedupe(cls, value: list[ChatKind]) -> list[ChatKind]:
        return list(dict.fromkeys(value))


@dataclass(frozen=True)
class TriggerContext:
    """What the filter may look at in an event."""

    text: str
    chat_kind: ChatKind
    mentioned: bool
    chat_id: str | None = None
    user_id: str | None = None
    is_message: bool = True
    """False for events that are not messages (`member.joined`, `reaction.added`, ...): they have no text
    and do not address the bot, so the group and ignore rules, which are about a message's text, are not
    asked; the chat types and access lists still are."""


@dataclass(frozen=True)
class TriggerMatch:
    """An accepted event; `strip` is the prefix to remove from its text ("" for none)."""

    strip: str = ""


def chat_kind_of(chat_type: Any) -> ChatKind:
    return "group" if isinstance(chat_type, str) and chat_type.lower() in GROUP_CHAT_TYPES else "private"


def text_without_prefix(text: str, prefix: str) -> str:
    """`text` without `prefix` and the spaces after it (what the runner gets when a prefix rule answered)."""
    return text[len(prefix) :].lstrip() if prefix and text.startswith(prefix) else text


@dataclass(frozen=True)
class TriggerFilter:
    """A stored policy, parsed and with its patterns compiled once (see `trigger_filter`)."""

    policy: TriggerPolicy
    group_patterns: tuple[regex.Pattern[str], ...]
    ignore_patterns: tuple[regex.Pattern[str], ...]

    def check(self, context: TriggerContext) -> TriggerMatch | None:
        """The match when the binding answers the event, else None."""
        policy = self.policy
        if context.chat_kind not in policy.chat_types or not self._access_allows(context):
            return None
        if not context.is_message:
            return TriggerMatch()
        strip = ""
        if context.chat_kind == "group":
            rule = self._group_rule(context)
            if rule is None:
                if not policy.group_always:
                    return None
                rule = ""
            strip = rule if policy.strip_prefix else ""
        text = text_without_prefix(context.text, strip)
        if any(text.startswith(prefix) for prefix in policy.ignore_prefixes):
            return None
        # A pattern that times out ignores the message: a filter that cannot decide refuses.
        if any(self._matches(p, text, search=True, timeout_means=True) for p in self.ignore_patterns):
            return None
        return TriggerMatch(strip=strip)

    def _access_allows(self, context: TriggerContext) -> bool:
        policy = self.policy
        if context.chat_kind == "group":
            chats = policy.access_group_chat_ids
            listed = EVERY_CHAT in chats or (context.chat_id is not None and context.chat_id in chats)
        else:
            users = policy.access_private_user_ids
            listed = EVERY_CHAT in users or (context.user_id is not None and context.user_id in users)
        listed = listed or (context.user_id is not None and context.user_id in policy.access_user_ids)
        return listed if policy.access_mode == "allow" else not listed

    def _group_rule(self, context: TriggerContext) -> str | None:
        """The rule that lets a group message through: "" for a mention or a pattern, the prefix for a
        prefix; None when none holds."""
        if self.policy.group_mention and context.mentioned:
            return ""
        prefix = next((p for p in self.policy.group_prefixes if context.text.startswith(p)), None)
        if prefix is not None:
            return prefix
        if any(self._matches(p, context.text, search=False, timeout_means=False) for p in self.group_patterns):
            return ""
        return None

    @staticmethod
    def _matches(pattern: regex.Pattern[str], text: str, *, search: bool, timeout_means: bool) -> bool:
        try:
            found = (pattern.search if search else pattern.match)(text, timeout=PATTERN_TIMEOUT_SECONDS)
        except TimeoutError:
            # The pattern, never the text: a message's text has no place in the log.
            logger.warning("trigger pattern %r timed out after %ss", pattern.pattern, PATTERN_TIMEOUT_SECONDS)
            return timeout_means
        return found is not None


def trigger_filter(stored: Any) -> TriggerFilter:
    """The filter of a binding's stored `trigger_policy` (an empty or missing one is the default policy).

    A stored value that no longer validates (written by hand in the database) refuses every event rather
    than answering more than its author meant; the binding's next edit names the problem."""
    if not stored:
        return _DEFAULT
    try:
        key = json.dumps(stored, sort_keys=True, ensure_ascii=False)
    except (TypeError, ValueError):
        return _REFUSE_ALL
    return _compiled(key)


@lru_cache(maxsize=1024)
def _compiled(key: str) -> TriggerFilter:
    try:
        policy = TriggerPolicy.model_validate_json(key)
    except ValueError:
        return _REFUSE_ALL
    return TriggerFilter(
        policy=policy,
        group_patterns=tuple(regex.compile(p) for p in policy.group_patterns),
        ignore_patterns=tuple(regex.compile(p) for p in policy.ignore_patterns),
    )


_DEFAULT = TriggerFilter(policy=TriggerPolicy(), group_patterns=(), ignore_patterns=())
# Built without validation: no policy a user can save answers nothing.
_REFUSE_ALL = TriggerFilter(policy=TriggerPolicy.model_construct(chat_types=[]), group_patterns=(), ignore_patterns=())
