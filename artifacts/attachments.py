"""Registering input attachments as artifacts (issue 4): what an entry adapter calls for each attachment
of an incoming message before the event is recorded, so runners only ever see `ArtifactRef`s.

An attachment is one of:
- `{"artifact_id": ...}` — an artifact already in the workspace (kept as it is);
- `{"base64": ..., "name"?, "mime_type"?}` — bytes, decoded;
- `{"data_url": "data:<type>;base64,<data>", "name"?}` — a data URL, decoded;
- `{"url": "https://...", "name"?, "mime_type"?}` — fetched through the SSRF-safe fetcher;
- `{"platform_ref": {...}}` — a platform's own file handle (e.g. a Telegram file id): kept as a ref,
  not fetched, because only the platform adapter can fetch it.
Decoded and fetched bytes are limited to `LANGBOT_ARTIFACT_FETCH_MAX_BYTES`; the MIME type is sniffed.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any
from urllib.parse import unquote_to_bytes

from django.conf import settings

from artifacts.fetch import FetchRefusedError, url_fetch
from artifacts.models import Artifact
from artifacts.selectors import artifact_get
from artifacts.services import artifact_create_from_bytes
from bindings.models import Workspace
from bindings.selectors import workspace_private_addresses_allowed
from transcripts.models import EventLog

_DATA_URL = re.compile(r"^data:(?P<type>[^;,]*)(?P<params>(;[^;,]*)*?)(?P<b64>;base64)?,(?P<data>.*)$", re.DOTALL)


class AttachmentRefusedError(Exception):
    """The attachment cannot be registered; the message is safe to show to the client."""


def _limit() -> int:
    return int(settings.LANGBOT_ARTIFACT_FETCH_MAX_BYTES)


def base64_decode(value: str) -> bytes:
    limit = _limit()
    if len(value) // 4 * 3 > limit + 3:
        raise AttachmentRefusedError(f"the attachment is larger than the limit of {limit} bytes")
    try:
        data = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise AttachmentRefusedError("the attachment is not valid base64") from None
    if len(data) > limit:
        raise AttachmentRefusedError(f"the attachment is {len(data)} bytes; the limit is {limit}")
    return data


def data_url_decode(url: str) -> tuple[bytes, str]:
    """The bytes and declared type of a `data:` URL."""
    match = _DATA_URL.match(url)
    if match is None:
        raise AttachmentRefusedError("not a data: URL")
    declared = match["type"] or "text/plain"
    if match["b64"]:
        return base64_decode(match["data"].strip()), declared
    data = unquote_to_bytes(match["data"])
    if len(data) > _limit():
        raise AttachmentRefusedError(f"the attachment is larger than the limit of {_limit()} bytes")
    return data, declared


def attachment_register(
    *, workspace: Workspace, attachment: dict[str, Any], conversation_id: str, event: EventLog | None = None
) -> dict[str, Any]:
    """The `ArtifactRef` (or, for a platform ref, the ref itself) that stands for `attachment`."""
    name = str(attachment.get("name") or "")
    declared = str(attachment.get("mime_type") or "")
    if attachment.get("artifact_id"):
        artifact = artifact_get(workspace=workspace, artifact_id=str(attachment["artifact_id"]))
        if artifact is None:
            raise AttachmentRefusedError(f"no artifact {attachment['artifact_id']!r} in this workspace")
        return artifact.as_ref()
    if isinstance(attachment.get("platform_ref"), dict):
        return {"platform_ref": attachment["platform_ref"], "name": name or None, "mime_type": declared or None}
    if isinstance(attachment.get("base64"), str):
        data = base64_decode(attachment["base64"])
    elif isinstance(attachment.get("data_url"), str):
        data, declared_by_url = data_url_decode(attachment["data_url"])
        declared = declared or declared_by_url
    elif isinstance(attachment.get("url"), str):
        url = attachment["url"]
        if url.startswith("data:"):
            data, declared_by_url = data_url_decode(url)
            declared = declared or declared_by_url
        else:
            try:
                fetched = url_fetch(url, allow_private=workspace_private_addresses_allowed(workspace=workspace))
            except FetchRefusedError as exc:
                raise AttachmentRefusedError(str(exc)) from None
            data = fetched.content
            declared = declared or (fetched.content_type or "")
            name = name or (fetched.filename or "")
    else:
        raise AttachmentRefusedError("an attachment needs artifact_id, base64, data_url, url or platform_ref")
    artifact = artifact_create_from_bytes(
        workspace=workspace,
        data=data,
        name=name or "attachment",
        mime_type=declared,
        conversation_id=conversation_id,
        source=Artifact.Source.INPUT,
        event=event,
    )
    return artifact.as_ref()
