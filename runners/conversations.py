"""Reads behind the admin's conversation pages (runners/conversations_admin.py): the conversations of the
workspaces a user may see, newest first, and one conversation's transcript with the runs that answered it —
their status, time, tokens, cost, tool calls, files and citations.

These live in runners, not transcripts, because a conversation is read here together with its runs, and
transcripts stands below runners (it may not import them).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db.models import Count, Max, OuterRef, Q, QuerySet, Subquery

from bindings.models import Workspace
from runners.models import Run, RunEvent
from runners.selectors import runs_citations
from transcripts.models import EventLog, TranscriptItem

CONVERSATIONS_PER_PAGE = 50
ITEMS_PER_PAGE = 100
# The results a conversation page draws beside a reply; the run's page has all of them.
SHOWN_RESULT_TYPES = ("tool.call.started", "tool.call.completed", "artifact.created")


def _json_text(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False) if value is not None else ""


@dataclass(frozen=True)
class ConversationRow:
    workspace_id: int
    workspace_slug: str
    conversation_id: str
    messages: int
    last_at: datetime
    last_role: str
    last_text: str
    bot: str
    platform: str


def conversation_rows(
    *, workspaces: QuerySet[Workspace] | None, search: str = "", offset: int = 0, limit: int = CONVERSATIONS_PER_PAGE
) -> tuple[list[ConversationRow], bool]:
    """A page of conversations (of `workspaces`; all when None) that have a transcript, the most recently
    active first, and whether more follow. `search` matches part of a conversation id."""
    items = TranscriptItem.objects.all()
    if workspaces is not None:
        items = items.filter(workspace__in=workspaces)
    if search:
        items = items.filter(conversation_id__icontains=search)
    latest_event = EventLog.objects.filter(
        workspace_id=OuterRef("workspace_id"), conversation_id=OuterRef("conversation_id"), bot__isnull=False
    ).order_by("-id")
    grouped = (
        items.values("workspace_id", "workspace__slug", "conversation_id")
        .annotate(
            last_id=Max("id"),
            messages=Count("id"),
            bot_name=Subquery(latest_event.values("bot__name")[:1]),
            bot_id=Subquery(latest_event.values("bot__bot_id")[:1]),
            platform=Subquery(latest_event.values("bot__platform")[:1]),
        )
        .order_by("-last_id")
    )
    rows = list(grouped[offset : offset + limit + 1])
    more = len(rows) > limit
    rows = rows[:limit]
    last = TranscriptItem.objects.in_bulk([row["last_id"] for row in rows])
    page = []
    for row in rows:
        item = last[row["last_id"]]
        text = item.content or (f"[{len(item.contents)}]" if item.contents else "")
        page.append(
            ConversationRow(
                workspace_id=row["workspace_id"],
                workspace_slug=row["workspace__slug"],
                conversation_id=row["conversation_id"],
                messages=row["messages"],
                last_at=item.created_at,
                last_role=item.get_role_display(),  # the role's name in the page's language
                last_text=text if len(text) <= 120 else text[:119] + "…",
                bot=row["bot_name"] or row["bot_id"] or "",
                platform=row["platform"] or "",
            )
        )
    return page, more


def citation_view(citation: dict[str, Any]) -> dict[str, Any]:
    """A citation as the page shows it, whatever runner gave it: its source's name (the local agent's and
    Dify's `document_name`, DashScope's `doc_name` or `title`, ...), score and excerpt."""
    keys = ("document_name", "doc_name", "title", "dataset_name", "document_id", "kb_id", "chunk_id")
    title = next((str(citation[k]) for k in keys if citation.get(k)), "")
    score = citation.get("rerank_score", citation.get("score"))
    excerpt = citation.get("excerpt") or citation.get("content") or ""
    return {
        "title": title or "—",
        "score": float(score) if isinstance(score, int | float) else None,
        "excerpt": str(excerpt),
    }


@dataclass
class RunCard:
    run: Run
    tools: list[dict[str, Any]] = field(default_factory=list)
    """One per tool call: `tool_name`, `parameters`, `result` or `error`, `done`."""
    files: list[dict[str, Any]] = field(default_factory=list)
    """The `artifact.created` results' data (artifact refs)."""
    citations: list[dict[str, Any]] = field(default_factory=list)
    # Filled by the page's view: where the run's page is, its duration and status colour.
    link: str = ""
    duration: str = ""
    colour: str = ""

    @property
    def host_usage(self) -> dict[str, Any]:
        usage = self.run.usage if isinstance(self.run.usage, dict) else {}
        host = usage.get("host")
        return host if isinstance(host, dict) else {}

    @property
    def tokens(self) -> Any:
        """What the host counted, else what the runner reported."""
        usage = self.run.usage if isinstance(self.run.usage, dict) else {}
        return self.host_usage.get("total_tokens", usage.get("total_tokens"))

    @property
    def error_text(self) -> str:
        error = self.run.error
        if not isinstance(error, dict):
            return ""
        return f"{error.get('code', '')}: {error.get('message', '')}"

    @property
    def cost(self) -> str:
        host = self.host_usage
        return f"{host['cost']} {host.get('currency', '')}".strip() if "cost" in host else ""


@dataclass
class Turn:
    item: TranscriptItem
    run: RunCard | None = None
    """The run that wrote this reply."""
    unanswered: list[RunCard] = field(default_factory=list)
    """After a message: runs it started that wrote no reply (failed, cancelled, still going, observers)."""
    files: list[dict[str, Any]] = field(default_factory=list)
    """Filled by the page's view: the message's files, as links."""


@dataclass
class ConversationPage:
    turns: list[Turn]
    older_before: int | None
    """`before` for the older page; None at the beginning."""
    bot: str = ""
    platform: str = ""


def conversation_page(
    *, workspace: Workspace, conversation_id: str, before: int | None = None, limit: int = ITEMS_PER_PAGE
) -> ConversationPage:
    """One page of the conversation's transcript, oldest first (the newest page unless `before`), with the
    runs that answered its messages."""
    queryset = TranscriptItem.objects.filter(workspace=workspace, conversation_id=conversation_id)
    if before is not None:
        queryset = queryset.filter(id__lt=before)
    newest_first = list(queryset.order_by("-id")[: limit + 1])
    more = len(newest_first) > limit
    items = list(reversed(newest_first[:limit]))
    run_ids = {item.run_id for item in items if item.run_id is not None}
    event_pks = {item.event_id for item in items if item.role == "user" and item.event_id is not None}
    runs = list(
        Run.objects.filter(workspace=workspace).filter(Q(run_id__in=run_ids) | Q(event_id__in=event_pks)).order_by("id")
    )
    cards = {run.pk: RunCard(run) for run in runs}
    tool_cards: dict[tuple[int, str], dict[str, Any]] = {}
    results = RunEvent.objects.filter(run_id__in=list(cards), type__in=SHOWN_RESULT_TYPES).order_by("run_id", "seq")
    for event in results:
        card = cards[event.run_id]
        data = event.data if isinstance(event.data, dict) else {}
        if event.type == "artifact.created":
            card.files.append(data)
            continue
        key = (event.run_id, str(data.get("tool_call_id") or event.seq))
        tool = tool_cards.get(key)
        if tool is None:
            tool = tool_cards[key] = {
                "tool_name": data.get("tool_name") or "", "done": False, "error": None,
                "parameters_text": "", "result_text": "", "error_text": "",
            }  # fmt: skip
            card.tools.append(tool)
        if event.type == "tool.call.started":
            tool.update(parameters_text=_json_text(data.get("parameters")))
        else:
            error = data.get("error")
            tool.update(
                done=True, error=error, error_text=_json_text(error), result_text=_json_text(data.get("result"))
            )
    for run_pk, citations in runs_citations(runs).items():
        cards[run_pk].citations = [citation_view(c) for c in citations]
    by_run_id = {card.run.run_id: card for card in cards.values()}
    replied = {item.run_id for item in items if item.role == "assistant" and item.run_id is not None}
    turns = []
    for item in items:
        turn = Turn(item=item, run=by_run_id.get(item.run_id) if item.role != "user" and item.run_id else None)
        if item.role == "user" and item.event_id is not None:
            turn.unanswered = [
                card for card in cards.values() if card.run.event_id == item.event_id and card.run.run_id not in replied
            ]
        turns.append(turn)
    bot_event = (
        EventLog.objects.filter(workspace=workspace, conversation_id=conversation_id, bot__isnull=False)
        .select_related("bot")
        .order_by("-id")
        .first()
    )
    bot = bot_event.bot if bot_event is not None else None
    return ConversationPage(
        turns=turns,
        older_before=items[0].pk if more and items else None,
        bot=(bot.name or bot.bot_id) if bot is not None else "",
        platform=bot.platform if bot is not None else "",
    )
