"""Hard caps of the protocol (docs/protocol.md, "Caps"), shared by the SDK's local checks and the host's enforcement.

The host is the boundary; the SDK checks the same numbers early only so runner authors get a clear
error before a round trip.
"""

from __future__ import annotations

KIB = 1024
MIB = 1024 * KIB

HISTORY_PAGE_DEFAULT = 50
HISTORY_PAGE_MAX = 100
EVENT_PAGE_DEFAULT = 50
EVENT_PAGE_MAX = 100
HISTORY_SEARCH_TOP_K_DEFAULT = 10
HISTORY_SEARCH_TOP_K_MAX = 50
KNOWLEDGE_TOP_K_DEFAULT = 5
KNOWLEDGE_TOP_K_MAX = 50

STATE_VALUE_MAX_BYTES = 256 * KIB
"""Size of a state value, measured as compact UTF-8 JSON."""
STATE_LIST_MAX_KEYS = 100
STATE_KEY_MAX_LENGTH = 256

STORAGE_VALUE_MAX_BYTES = 10 * MIB
"""Size of a storage value after base64 decoding."""
STORAGE_KEY_MAX_LENGTH = 512
STORAGE_LIST_MAX_KEYS = 1000

ARTIFACT_INLINE_MAX_BYTES = 1 * MIB
"""Decoded size of ``artifact.created`` content sent inline as base64."""
ARTIFACT_READ_DEFAULT_BYTES = 1 * MIB
ARTIFACT_READ_MAX_BYTES = 10 * MIB
ARTIFACT_UPLOAD_CHUNK_DEFAULT_BYTES = 4 * MIB
ARTIFACT_UPLOAD_CHUNK_MAX_BYTES = 8 * MIB
"""Decoded size of one ``artifact_upload_chunk`` (its base64 stays well inside one wire frame)."""
ARTIFACT_UPLOAD_DEFAULT_MAX_BYTES = 100 * MIB
"""Size of one uploaded artifact unless the workspace's setting says otherwise (the host's to decide)."""
ARTIFACT_UPLOADS_OPEN_MAX = 4
"""Uploads one run may have open at once."""

RESULT_EVENT_MAX_BYTES = 1 * MIB
"""One ``AgentRunResult`` encoded as JSON."""
WIRE_MESSAGE_MAX_BYTES = 16 * MIB
"""One wire frame (request or response) encoded as JSON."""

RUNNER_ID_PART_MAX_LENGTH = 64
