"""What every model call of a run shares: the model read from the workspace with its provider, checked
for the kind the action needs, and the provider's timeout shortened to what the run has left. The calls
themselves are `resources.providers`'.
"""

from __future__ import annotations

from hostapi.base import ProxyCall, not_found
from langbot_sdk.authorization import model_kind_check
from resources.models import Model, ModelProvider
from resources.selectors import model_with_provider


async def model_of_kind(call: ProxyCall, kind: str) -> Model:
    """The call's model with its provider; it may have been deleted since the run started (`not_found`)."""
    model_id = call.request.model_id
    model = await call.db(model_with_provider, workspace_id=call.session.scope.workspace_id, model_id=model_id)
    if model is None:
        raise not_found(f"model {model_id!r} is not configured on this host", model_id=model_id)
    model_kind_check(model_id, model.kind, kind)
    return model


def call_timeout(call: ProxyCall, provider: ModelProvider) -> float:
    """The provider's timeout, shortened to what the run has left."""
    return min(float(provider.timeout_seconds), max(call.remaining(), 0.001))
