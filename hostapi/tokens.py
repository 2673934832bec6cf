"""`count_tokens`: the run's messages and text counted with the model's tokenizer, on the host, without
calling the provider (`resources.tokens` says when the count is exact and when it is an estimate)."""

from __future__ import annotations

import asyncio
from typing import Any

from hostapi.base import ProxyCall, not_found
from langbot_sdk.protocol import CountTokensResult
from resources.selectors import model_with_provider
from resources.tokens import token_count


async def tokens_count(call: ProxyCall) -> dict[str, Any]:
    request = call.request
    model = await call.db(model_with_provider, workspace_id=call.session.scope.workspace_id, model_id=request.model_id)
    if model is None:
        raise not_found(f"model {request.model_id!r} is not configured on this host", model_id=request.model_id)
    # Off the event loop: the first count loads the encoding (~0.3 s), and a long text takes a while.
    counted = await asyncio.to_thread(token_count, model_name=model.name, messages=request.messages, text=request.text)
    return CountTokensResult(tokens=counted.tokens, estimated=counted.estimated, encoding=counted.encoding).model_dump(
        mode="json"
    )
