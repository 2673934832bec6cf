"""What every model call of a run shares: the model read from the workspace with its provider, checked
for the kind the action needs and against the budgets of the run's workspace, bot and actor; the
provider's timeout shortened to what the run has left; and, once it has answered, its usage and cost
counted on the run and in the workspace's spend (runners/access/budgets.py). The calls themselves are
`resources.providers`'.
"""

from __future__ import annotations

import logging
from typing import Any

from hostapi.base import ProxyCall, not_found
from langbot_sdk.authorization import model_kind_check
from langbot_sdk.protocol import AgentAPIException
from resources.models import Model, ModelProvider
from resources.selectors import model_with_provider
from runners.access.budgets import budget_exceeded, spend_record
from runners.access.usage import ModelPrice

logger = logging.getLogger(__name__)


async def model_of_kind(call: ProxyCall, kind: str) -> Model:
    """The call's model with its provider; it may have been deleted since the run started (`not_found`).
    A call past a budget is refused here, before the provider is asked (`quota_exceeded`)."""
    model_id = call.request.model_id
    model = await call.db(model_with_provider, workspace_id=call.session.scope.workspace_id, model_id=model_id)
    if model is None:
        raise not_found(f"model {model_id!r} is not configured on this host", model_id=model_id)
    model_kind_check(model_id, model.kind, kind)
    exceeded = await call.db(budget_exceeded, scope=call.session.scope)
    if exceeded is not None:
        details = exceeded.details()
        # Kept on the run (`usage.host.quota_exceeded`), so the operator sees why its model calls stopped.
        call.session.usage.refused = {"message": exceeded.message, **details}
        raise AgentAPIException.quota_exceeded(exceeded.message, model_id=model_id, **details)
    return model


def call_timeout(call: ProxyCall, provider: ModelProvider) -> float:
    """The provider's timeout, shortened to what the run has left."""
    return min(float(provider.timeout_seconds), max(call.remaining(), 0.001))


async def usage_count(call: ProxyCall, model: Model, usage: dict[str, Any] | None, *, partial: bool = False) -> None:
    """Count an answered call on the run, at the model's prices as they are now, and add its cost to the
    workspace's spend. A failed spend write is logged, not raised: the call has been made and answered."""
    price = ModelPrice(model.input_price_per_million, model.output_price_per_million)
    cost = call.session.usage.record(call.request.model_id, usage, partial=partial, price=price)
    try:
        await call.db(spend_record, scope=call.session.scope, cost=cost, usage=usage)
    except Exception:
        logger.exception("run %s: the spend of a model call was not recorded", call.session.run_id)
