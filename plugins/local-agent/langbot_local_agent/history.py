"""Conversation history: pulled page by page through `api.history.page` (the host inlines none), fitted
to a token budget, and compacted into a summary checkpoint kept in conversation state.

The checkpoint (state key `local-agent.checkpoint`, conversation scope) holds the persisted fences — the
conversation summary made by the model — and the cursor of the newest transcript item the summary
covers. A turn with a checkpoint reads only what came after it: forward pages from that cursor up to the
current message. Without one (or when more than `history-fetch-limit` items came after it) the turn
reads backward from the current message, newest first, up to the limit.

Compaction happens when the history does not fit its budget or holds more than `max-round` rounds: the
newest items that fit `keep-recent-tokens` (and `max-round`) stay verbatim, starting at a user message;
everything older is merged by the model with the previous summary into a new one, and the checkpoint
moves to the newest summarised item. It is written only when it changes, so the summary stays stable
between compactions (cache-friendly). If the summary cannot be made, the older items are left out of
this turn instead, and the checkpoint stays as it was.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from langbot_local_agent.budget import TokenCounter, truncate_to_tokens
from langbot_local_agent.context import LOCAL_AGENT_FENCES, SUMMARY, FenceInjection, injections_to_persist
from langbot_sdk.protocol import AgentAPIException, AgentRunContext, TranscriptItem, limits
from langbot_sdk.proxy import AgentRunAPIProxy

CHECKPOINT_KEY = "local-agent.checkpoint"
STATE_SCOPE = "conversation"
CHECKPOINT_VERSION = 1
LINE_MAX_CHARS = 2000


@dataclass
class Checkpoint:
    cursor: str
    """Cursor of the newest transcript item the summary covers."""
    fences: list[FenceInjection] = field(default_factory=list)
    summarized_items: int = 0
    run_id: str = ""

    @property
    def summary(self) -> str:
        return next((f.content for f in self.fences if f.kind == SUMMARY), "")

    def to_state(self) -> dict[str, Any]:
        return {
            "version": CHECKPOINT_VERSION,
            "cursor": self.cursor,
            "fences": [f.to_state() for f in injections_to_persist(self.fences, LOCAL_AGENT_FENCES)],
            "summarized_items": self.summarized_items,
            "run_id": self.run_id,
        }

    @classmethod
    def from_state(cls, value: Any) -> Checkpoint | None:
        if not isinstance(value, dict) or not isinstance(value.get("cursor"), str) or not value["cursor"]:
            return None
        fences = [f for raw in value.get("fences") or [] if (f := FenceInjection.from_state(raw)) is not None]
        known = [f for f in fences if f.kind in LOCAL_AGENT_FENCES]
        count = value.get("summarized_items")
        return cls(
            cursor=value["cursor"],
            fences=injections_to_persist(known, LOCAL_AGENT_FENCES),
            summarized_items=count if isinstance(count, int) else 0,
            run_id=str(value.get("run_id") or ""),
        )


def state_usable(ctx: AgentRunContext) -> bool:
    state = ctx.resources.state
    if not (ctx.context.available_apis.state or state.enabled):
        return False
    return not state.scopes or STATE_SCOPE in state.scopes


async def checkpoint_load(api: AgentRunAPIProxy, ctx: AgentRunContext) -> Checkpoint | None:
    if not state_usable(ctx):
        return None
    try:
        got = await api.state.get(STATE_SCOPE, CHECKPOINT_KEY)
    except AgentAPIException:
        return None
    return Checkpoint.from_state(got.value) if got.found else None


async def checkpoint_save(api: AgentRunAPIProxy, ctx: AgentRunContext, checkpoint: Checkpoint) -> bool:
    if not state_usable(ctx):
        return False
    try:
        await api.state.set(STATE_SCOPE, CHECKPOINT_KEY, checkpoint.to_state())
    except AgentAPIException:
        return False
    return True


# --- reading ----------------------------------------------------------------------------------------


@dataclass
class HistoryRead:
    items: list[TranscriptItem] = field(default_factory=list)
    """Oldest first, the current message excluded."""
    incremental: bool = False
    """Read forward from the checkpoint up to the current message (nothing after the checkpoint missed)."""
    older_unread: bool = False
    """Older items exist that this turn did not read (fetch limit) and no checkpoint covers."""
    pages: int = 0


def history_page_usable(ctx: AgentRunContext) -> bool:
    return ctx.context.available_apis.history_page or ctx.resources.history.page


async def history_read(
    api: AgentRunAPIProxy, ctx: AgentRunContext, *, checkpoint: Checkpoint | None, limit: int
) -> HistoryRead:
    read = HistoryRead()
    if limit <= 0 or not history_page_usable(ctx) or ctx.context.latest_cursor is None:
        return read
    current_cursor = str(ctx.context.transcript_seq) if ctx.context.transcript_seq is not None else None

    def is_current(item: TranscriptItem) -> bool:
        return item.event_id == ctx.event.event_id or (current_cursor is not None and item.cursor == current_cursor)

    page_max = min(limits.HISTORY_PAGE_MAX, ctx.resources.history.max_page_size)
    if checkpoint is not None:
        cursor: str | None = checkpoint.cursor
        collected: list[TranscriptItem] = []
        while len(collected) < limit and cursor is not None:
            page = await api.history.page(
                after_cursor=cursor, direction="forward", limit=min(page_max, limit - len(collected))
            )
            read.pages += 1
            for item in page.items:
                if is_current(item):
                    read.items, read.incremental = collected, True
                    return read
                collected.append(item)
            cursor = page.next_cursor if page.items else None
        if cursor is None:
            read.items, read.incremental = collected, True
            return read
        # More came after the checkpoint than one turn may read: take the newest instead.

    before = current_cursor
    newest_first: list[list[TranscriptItem]] = []
    total = 0
    has_more = True
    while total < limit and has_more:
        # One more than needed: the first page may hold the current message, which is left out.
        page = await api.history.page(
            before_cursor=before, direction="backward", limit=min(page_max, limit - total + 1)
        )
        read.pages += 1
        items = [item for item in page.items if not is_current(item)]
        newest_first.append(items)
        total += len(items)
        has_more = bool(page.items) and page.next_cursor is not None and page.has_more
        before = page.next_cursor
    items = [item for page_items in reversed(newest_first) for item in page_items]
    read.older_unread = has_more or len(items) > limit
    items = items[-limit:]
    if checkpoint is not None:
        # Items the checkpoint already covers (when the read above went that far back).
        positions = [i for i, item in enumerate(items) if item.cursor == checkpoint.cursor]
        if positions:
            items, read.older_unread = items[positions[-1] + 1 :], False
    read.items = items
    return read


def item_message(item: TranscriptItem) -> dict[str, Any] | None:
    """A past transcript item as a chat message (user and assistant text; attachments as references)."""
    if item.role not in ("user", "assistant"):
        return None
    text = item.content or "\n".join(p.text for p in item.contents if p.type == "text" and p.text)
    notes = [f"[attachment: {a.name or a.artifact_id} ({a.mime_type or 'unknown type'})]" for a in item.artifacts]
    notes += [f"[{p.type}]" for p in item.contents if p.type != "text"]
    body = "\n".join(filter(None, [text, *notes]))
    return {"role": item.role, "content": body} if body else None


# --- compaction -------------------------------------------------------------------------------------


def compaction_split(
    tokens: Sequence[int], roles: Sequence[str], *, budget: int, keep_recent_tokens: int, max_round: int
) -> int:
    """How many of the oldest history messages to summarise (0: keep them all verbatim).

    Compact when the history exceeds `budget` or holds more than `max_round` rounds (user messages; 0 =
    no round cap). The kept tail is the newest messages within `min(keep_recent_tokens, budget)` and
    `max_round` rounds, cut back so it starts at a user message.
    """
    rounds = sum(1 for role in roles if role == "user")
    over_rounds = max_round > 0 and rounds > max_round
    if sum(tokens) <= budget and not over_rounds:
        return 0
    keep_budget = min(keep_recent_tokens, budget)
    kept_tokens = 0
    kept_rounds = 0
    start = len(tokens)
    for index in range(len(tokens) - 1, -1, -1):
        is_user = roles[index] == "user"
        if kept_tokens + tokens[index] > keep_budget or (max_round > 0 and is_user and kept_rounds >= max_round):
            break
        kept_tokens += tokens[index]
        kept_rounds += is_user
        start = index
    while start < len(tokens) and roles[start] != "user":
        start += 1
    return start


SUMMARY_INSTRUCTIONS = (
    "You keep a running summary of a conversation between a user and an assistant, for the assistant's own "
    "later use. Merge the earlier summary (if any) and the new messages into one summary that keeps facts, "
    "names, numbers, decisions, the user's preferences and open questions; drop small talk. Write at most "
    "about {tokens} tokens, in the conversation's language. Reply with the summary only."
)


def summary_request(
    previous: str, messages: Sequence[dict[str, Any]], *, summary_tokens: int, input_budget: int, counter: TokenCounter
) -> list[dict[str, Any]]:
    """The messages asking the model for a new summary; the oldest lines go first if they do not fit."""
    lines = [f"{m['role']}: {str(m.get('content') or '')[:LINE_MAX_CHARS]}" for m in messages]
    while len(lines) > 1 and counter.text("\n".join(lines)) > input_budget:
        lines.pop(0)
    body = "\n".join(lines)
    if counter.text(body) > input_budget:
        body = truncate_to_tokens(body, input_budget)
    parts = []
    if previous:
        parts.append(f"<earlier-summary>\n{previous}\n</earlier-summary>")
    parts.append(f"<new-messages>\n{body}\n</new-messages>")
    return [
        {"role": "system", "content": SUMMARY_INSTRUCTIONS.format(tokens=summary_tokens)},
        {"role": "user", "content": "\n\n".join(parts)},
    ]
