"""What the run page of the admin shows of a run's results and usage, built for reading rather than as JSON:
the result events as a timeline (an icon and label per event type, the time since the run started, a one-line
summary, the payload folded away), and the runner's own usage report as a table.

Consecutive `message.delta` results are one row (the streamed text and how many pieces it came in): a long
reply streams hundreds of them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.template.loader import render_to_string
from django.utils.safestring import SafeString
from django.utils.translation import gettext_lazy as _

from runners.models import Run, RunEvent

# Per result type: the icon (a character, no image files) and the label.
EVENT_KINDS: dict[str, tuple[str, Any]] = {
    "message.delta": ("✎", _("Reply streamed")),
    "message.completed": ("💬", _("Reply")),
    "tool.call.started": ("🔧", _("Tool called")),
    "tool.call.completed": ("✔", _("Tool answered")),
    "artifact.created": ("📎", _("File created")),
    "state.updated": ("🗂", _("State updated")),
    "action.requested": ("⚑", _("Action requested")),
    "run.completed": ("✅", _("Run completed")),
    "run.failed": ("⛔", _("Run failed")),
}
SUMMARY_CHARS = 160


@dataclass
class TimelineRow:
    type: str
    icon: str
    label: Any
    offset: str
    """Time since the run started (since it was created while it never started), e.g. "+1.25 s"."""
    created_at: datetime
    seq: str
    summary: str = ""
    failed: bool = False
    payload: str = ""
    pieces: int = 1
    extra: dict[str, Any] = field(default_factory=dict)


def _text(content: Any) -> str:
    """The text of a message's content: a string, or the text parts of a list of content parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(part.get("text") or "") for part in content if isinstance(part, dict) and part.get("type") == "text"
        )
    if isinstance(content, dict):
        return str(content.get("text") or "")
    return ""


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= SUMMARY_CHARS else text[: SUMMARY_CHARS - 1] + "…"


def _offset(start: datetime, when: datetime) -> str:
    seconds = (when - start).total_seconds()
    if seconds < 60:
        return f"+{seconds:.2f} s"
    return f"+{int(seconds // 60)} min {seconds % 60:.0f} s"


def _summary(event_type: str, data: dict[str, Any]) -> tuple[str, bool]:
    """One line of what the result says, and whether it reports a failure."""
    if event_type == "message.completed":
        return _short(_text((data.get("message") or {}).get("content"))), False
    if event_type == "tool.call.started":
        return str(data.get("tool_name") or ""), False
    if event_type == "tool.call.completed":
        error = data.get("error")
        if error:
            message = error.get("message") if isinstance(error, dict) else error
            return _short(f"{data.get('tool_name') or ''}: {message}"), True
        return str(data.get("tool_name") or ""), False
    if event_type == "artifact.created":
        return _short(" · ".join(str(data[k]) for k in ("name", "mime_type") if data.get(k))), False
    if event_type == "state.updated":
        return f"{data.get('scope', '')}:{data.get('key', '')}", False
    if event_type == "action.requested":
        return str(data.get("action") or ""), False
    if event_type == "run.failed":
        return _short(f"{data.get('code', '')}: {data.get('message', '')}"), True
    if event_type == "run.completed":
        citations = (data.get("metadata") or {}).get("citations") if isinstance(data.get("metadata"), dict) else None
        parts = []
        if isinstance(citations, list) and citations:
            parts.append(f"{len(citations)} citation(s)")
        if data.get("finish_reason"):
            parts.append(str(data["finish_reason"]))
        return " · ".join(parts), False
    return "", False


def timeline_rows(run: Run, events: list[RunEvent]) -> list[TimelineRow]:
    start = run.started_at or run.created_at
    rows: list[TimelineRow] = []
    for event in events:
        data = event.data if isinstance(event.data, dict) else {}
        if event.type == "message.delta" and rows and rows[-1].type == "message.delta":
            last = rows[-1]
            last.pieces += 1
            last.extra["text"] += _text(
                (data.get("chunk") or {}).get("content") if isinstance(data.get("chunk"), dict) else data.get("chunk")
            )
            last.summary = _short(last.extra["text"])
            last.seq = f"{last.seq.split('–')[0]}–{event.seq}"
            continue
        icon, label = EVENT_KINDS.get(event.type, ("•", event.type))
        row = TimelineRow(
            type=event.type,
            icon=icon,
            label=label,
            offset=_offset(start, event.created_at),
            created_at=event.created_at,
            seq=str(event.seq),
        )
        if event.type == "message.delta":
            chunk = data.get("chunk")
            row.extra["text"] = _text(chunk.get("content") if isinstance(chunk, dict) else chunk)
            row.summary = _short(row.extra["text"])
        else:
            row.summary, row.failed = _summary(event.type, data)
            row.payload = json.dumps(data, indent=2, ensure_ascii=False) if data else ""
        rows.append(row)
    return rows


def run_timeline_html(run: Run) -> SafeString:
    events = list(RunEvent.objects.filter(run=run).order_by("seq"))
    return SafeString(render_to_string("admin/runners/run/timeline.html", {"rows": timeline_rows(run, events)}))


def _flatten(value: Any, prefix: str = "") -> list[tuple[str, str]]:
    if isinstance(value, dict):
        rows: list[tuple[str, str]] = []
        for key, item in value.items():
            rows += _flatten(item, f"{prefix}.{key}" if prefix else str(key))
        return rows
    if isinstance(value, list):
        return [(prefix, json.dumps(value, ensure_ascii=False))]
    return [(prefix, "—" if value is None else str(value))]


def runner_usage_html(run: Run) -> SafeString:
    """The usage the runner reported (not what the host counted, which has its own table), one row per figure
    (`models.gpt-4o.prompt_tokens` for nested ones)."""
    usage = run.usage if isinstance(run.usage, dict) else {}
    rows = _flatten({k: v for k, v in usage.items() if k != "host"})
    return SafeString(render_to_string("admin/runners/run/usage.html", {"rows": rows}))
