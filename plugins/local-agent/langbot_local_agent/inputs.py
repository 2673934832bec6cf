"""The current user message from the event's structured input (text, content parts, attachments).

Images go to the model as image parts when it `supports_vision` — inline parts as they came, image
artifacts read through `api.artifacts` up to `IMAGE_MAX_BYTES`; for a model without vision they become
references. Every other attachment is a bounded reference (name, type, size, artifact id) in the
`attachment-refs` fence, never its content: the model cannot read a file it was not given, and a large
file would crowd out the conversation.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any

from langbot_sdk.protocol import AgentAPIException, AgentRunContext, ArtifactRef, ContentElement
from langbot_sdk.proxy import AgentRunAPIProxy

IMAGE_MAX_BYTES = 5 * 1024 * 1024
MAX_REFERENCES = 20
NAME_MAX_CHARS = 120


@dataclass
class UserInput:
    message: dict[str, Any]
    references: list[str] = field(default_factory=list)
    """One line per attachment the model gets only as a reference."""
    images: int = 0

    @property
    def text(self) -> str:
        content = self.message["content"]
        if isinstance(content, str):
            return content
        return "\n".join(p["text"] for p in content if p.get("type") == "text" and p.get("text"))


def _reference(kind: str, name: str | None, mime: str | None, size: int | None, artifact_id: str | None) -> str:
    parts = [f"{kind}: {(name or 'unnamed')[:NAME_MAX_CHARS]}"]
    if mime:
        parts.append(f"type {mime}")
    if size is not None:
        parts.append(f"{size} bytes")
    if artifact_id:
        parts.append(f"artifact {artifact_id}")
    return "- " + ", ".join(parts)


def _is_image(mime: str | None) -> bool:
    return bool(mime and mime.startswith("image/"))


async def _image_from_artifact(api: AgentRunAPIProxy, ref: ArtifactRef) -> dict[str, Any] | None:
    if ref.size is not None and ref.size > IMAGE_MAX_BYTES:
        return None
    try:
        read = await api.artifacts.read_range(ref.artifact_id, 0, IMAGE_MAX_BYTES)
    except AgentAPIException:
        return None
    if not read.eof:
        return None
    data = base64.b64encode(read.data()).decode("ascii")
    return {"type": "image_base64", "image_base64": data, "mime_type": ref.mime_type or "image/png"}


def _part_image(part: ContentElement) -> dict[str, Any] | None:
    if part.type == "image_url" and part.image_url:
        return {"type": "image_url", "image_url": part.image_url}
    if part.type in ("image_base64", "image_url") and part.image_base64:
        return {"type": "image_base64", "image_base64": part.image_base64, "mime_type": part.mime_type or "image/png"}
    return None


async def user_input_build(api: AgentRunAPIProxy, ctx: AgentRunContext, *, vision: bool) -> UserInput:
    texts: list[str] = [ctx.input.text] if ctx.input.text else []
    images: list[dict[str, Any]] = []
    references: list[str] = []
    for part in ctx.input.contents:
        image = _part_image(part)
        if part.type == "text":
            if part.text and part.text not in texts:
                texts.append(part.text)
        elif image is not None and vision:
            images.append(image)
        elif image is not None or part.type in ("image_url", "image_base64"):
            references.append(_reference("image", part.file_name, part.mime_type, None, part.artifact_id))
        else:
            references.append(
                _reference(part.type, part.file_name or part.file_url, part.mime_type, None, part.artifact_id)
            )
    artifacts_readable = ctx.context.available_apis.artifact_read
    for ref in ctx.input.attachments:
        if _is_image(ref.mime_type) and vision and artifacts_readable:
            image = await _image_from_artifact(api, ref)
            if image is not None:
                images.append(image)
                continue
        kind = "image" if _is_image(ref.mime_type) else "file"
        references.append(_reference(kind, ref.name, ref.mime_type, ref.size, ref.artifact_id))
    if len(references) > MAX_REFERENCES:
        extra = len(references) - MAX_REFERENCES
        references = [*references[:MAX_REFERENCES], f"- … and {extra} more attachments"]
    text = "\n".join(texts)
    content: str | list[dict[str, Any]] = text
    if images:
        content = [*([{"type": "text", "text": text}] if text else []), *images]
    return UserInput({"role": "user", "content": content}, references, len(images))
