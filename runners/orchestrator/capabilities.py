"""What the host does with the capabilities a runner declares in its manifest (docs/context-and-results.md,
"Capabilities the host honours"): pure functions of the manifest, the binding's delivery policy and the
event's input, used by the context builder and by the gateway before it records an event.

- `multimodal_input: false`: the non-text parts of the input (images, files, audio, any content part
  that is not text) are replaced by a text note naming each, and the notes are appended to `input.text`,
  so a text-only runner reads what the user sent instead of failing on it. Attachments stay as artifact
  refs (metadata only): a runner that pulls artifacts may still read them. A binding whose delivery
  policy says `non_text_input: "refuse"` refuses such an event instead (`input_refusal`).
- `streaming: false`: `runner_streams` is false, so the run's delivery says it will not stream
  (`RunSession.authorization()["delivery"]`, read by the runs API, the chat and the platforms).
"""

from __future__ import annotations

from typing import Any

from langbot_sdk.protocol import AgentInput, AgentRunnerManifest, ArtifactRef, ContentElement

NON_TEXT_REFUSED_CODE = "input.unsupported"


def _size(size: int | None) -> str:
    if size is None:
        return ""
    if size < 1024:
        return f"{size} bytes"
    if size < 1024 * 1024:
        return f"{size / 1024:.1f} KiB"
    return f"{size / (1024 * 1024):.1f} MiB"


def _kind(mime_type: str | None, fallback: str) -> str:
    major = (mime_type or "").split("/", 1)[0]
    return major if major in ("image", "audio", "video") else fallback


def _note(kind: str, name: str | None, mime_type: str | None, size: int | None) -> str:
    details = ", ".join(part for part in (mime_type or "", _size(size)) if part)
    named = f" {name}" if name else ""
    return f"[{kind}{named}{f' ({details})' if details else ''}: not shown, this agent reads text only]"


def part_note(part: ContentElement) -> str:
    """The text that stands for a non-text content part."""
    extra: dict[str, Any] = part.model_extra or {}
    size = extra.get("size") if isinstance(extra.get("size"), int) else None
    fallback = part.type.split("_", 1)[0] if part.type else "content"
    if part.type.startswith("image"):
        fallback = "image"
    elif part.type in ("file", "artifact"):
        fallback = "file"
    return _note(_kind(part.mime_type, fallback), part.file_name, part.mime_type, size)


def attachment_note(ref: ArtifactRef) -> str:
    return _note(_kind(ref.mime_type, "file"), ref.name, ref.mime_type, ref.size)


def non_text_parts(agent_input: AgentInput) -> list[str]:
    """Notes for every non-text part of the input, content parts first, then attachments."""
    notes = [part_note(part) for part in agent_input.contents if part.type != "text"]
    return notes + [attachment_note(ref) for ref in agent_input.attachments]


def input_for_runner(agent_input: AgentInput, manifest: AgentRunnerManifest) -> AgentInput:
    """The input as the runner gets it: unchanged for a multimodal runner; for a text-only one, each
    non-text content part replaced by its note and the notes appended to the text."""
    if manifest.capabilities.multimodal_input:
        return agent_input
    notes = non_text_parts(agent_input)
    if not notes:
        return agent_input
    contents = [
        part if part.type == "text" else ContentElement.of_text(part_note(part)) for part in agent_input.contents
    ]
    text = "\n".join([agent_input.text, *notes] if agent_input.text else notes)
    return agent_input.model_copy(update={"text": text, "contents": contents})


def input_refusal(agent_input: AgentInput, manifest: AgentRunnerManifest, *, policy: str) -> str | None:
    """Why a binding with `non_text_input: "refuse"` refuses this input (None: it takes it)."""
    if policy != "refuse" or manifest.capabilities.multimodal_input:
        return None
    notes = non_text_parts(agent_input)
    if not notes:
        return None
    return (
        f"runner {manifest.id} reads text only, and this binding refuses messages with images, files or other "
        f"non-text parts ({len(notes)} sent); send the message as text"
    )


def runner_streams(manifest: AgentRunnerManifest) -> bool:
    return manifest.capabilities.streaming
