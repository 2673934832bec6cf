"""The token usage of a run's model calls as the host itself counted it, and what they cost: kept in memory
on the run's session while it runs and stored with the run (`Run.usage["host"]`, next to what the runner
reported) when it ends. A stream closed before its usage chunk arrived is counted as a call with what did
arrive and marks the model's figures `partial`.

A call's cost is its tokens at the model's prices as they were when the call was made (`ModelPrice`, read
with the model at each call), so a price changed later leaves every run's cost as it was. Costs are
`Decimal`s, stored as decimal strings; a model without prices has no `cost` and adds nothing to the run's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django.conf import settings

TOKEN_FIELDS = ("prompt_tokens", "completion_tokens", "total_tokens")
MILLION = Decimal(1_000_000)


def _tokens(usage: dict[str, Any] | None, name: str) -> int:
    value = (usage or {}).get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def input_output_tokens(usage: dict[str, Any] | None) -> tuple[int, int]:
    """The input and output tokens of one call. A provider that reports only `total_tokens` (embeddings,
    some rerankers) has all of them charged as input."""
    completion = _tokens(usage, "completion_tokens")
    prompt = _tokens(usage, "prompt_tokens")
    if not prompt:
        prompt = max(_tokens(usage, "total_tokens") - completion, 0)
    return prompt, completion


def decimal_text(value: Decimal) -> str:
    """A cost as stored and shown: a plain decimal string, never a float or an exponent."""
    text = format(value.normalize(), "f")
    return "0" if text in ("-0", "") else text


@dataclass(frozen=True)
class ModelPrice:
    """A model's prices per million tokens at the time of a call; None where it has none."""

    input_per_million: Decimal | None = None
    output_per_million: Decimal | None = None

    @property
    def priced(self) -> bool:
        return self.input_per_million is not None or self.output_per_million is not None

    def cost(self, usage: dict[str, Any] | None) -> Decimal | None:
        """What a call with this usage costs, or None when the model has no price."""
        if not self.priced:
            return None
        prompt, completion = input_output_tokens(usage)
        return (prompt * (self.input_per_million or 0) + completion * (self.output_per_million or 0)) / MILLION


@dataclass
class ModelUsage:
    """Per model id: `{"prompt_tokens", "completion_tokens", "total_tokens", "calls"}` (+ `"partial": True`,
    + `"cost"` once a priced call was made). `refused` is the last budget refusal of a model call, kept so
    the operator sees on the run why its calls stopped."""

    models: dict[str, dict[str, Any]] = field(default_factory=dict)
    costs: dict[str, Decimal] = field(default_factory=dict)
    refused: dict[str, Any] | None = None

    def record(
        self, model_id: str, usage: dict[str, Any] | None, *, partial: bool = False, price: ModelPrice | None = None
    ) -> Decimal | None:
        """Count one call; returns its cost (None for an unpriced model)."""
        tally = self.models.setdefault(model_id, dict.fromkeys(TOKEN_FIELDS, 0) | {"calls": 0})
        for name in TOKEN_FIELDS:
            tally[name] += _tokens(usage, name)
        tally["calls"] += 1
        if partial:
            tally["partial"] = True
        cost = (price or ModelPrice()).cost(usage)
        if cost is not None:
            self.costs[model_id] = self.costs.get(model_id, Decimal(0)) + cost
            tally["cost"] = decimal_text(self.costs[model_id])
        return cost

    @property
    def cost(self) -> Decimal | None:
        """The run's cost so far; None when no priced model was called."""
        return sum(self.costs.values(), Decimal(0)) if self.costs else None

    def as_usage(self) -> dict[str, Any]:
        """The figures as stored under `Run.usage["host"]`."""
        totals = {name: sum(tally[name] for tally in self.models.values()) for name in TOKEN_FIELDS}
        stored: dict[str, Any] = {
            "models": {model_id: dict(tally) for model_id, tally in self.models.items()},
            **totals,
        }
        cost = self.cost
        if cost is not None:
            stored["cost"] = decimal_text(cost)
            stored["currency"] = settings.LANGBOT_COST_CURRENCY
        if self.refused is not None:
            stored["quota_exceeded"] = dict(self.refused)
        return stored


def usage_with_host(runner_usage: dict[str, Any] | None, host: ModelUsage) -> dict[str, Any] | None:
    """The runner's reported usage as it is, with the host's own figures under `"host"` when any call was made
    (or refused for a budget). A runner cannot forge them: its own `"host"` key is replaced."""
    reported = {name: value for name, value in (runner_usage or {}).items() if name != "host"}
    if not host.models and host.refused is None:
        return reported if runner_usage is not None else None
    return {**reported, "host": host.as_usage()}
