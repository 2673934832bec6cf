"""`retrieve_knowledge_base` against the workspace's knowledge bases (PROTOCOL_V1 §7.3). The caller
(`providers.knowledge_retrieve`) has already checked the run's snapshot."""

from __future__ import annotations

from runners.hostapi.handlers.base import HandlerResult, ProxyCall, not_found


async def knowledge_search(call: ProxyCall) -> HandlerResult:
    kb_id = call.request.kb_id
    raise not_found(f"knowledge base {kb_id!r} is not configured on this host", kb_id=kb_id)
