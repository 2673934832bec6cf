"""The token usage of a run's model calls as the host itself counted it, kept in memory on the run's
session while it runs and stored with the run (`Run.usage["host"]`, next to what the runner reported) when
it ends. A stream closed before its usage chunk arrived is counted as a call with what did arrive and
marks the model's figures `partial`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

TOKEN_FIELDS = ("prompt_tokens", "completion_tokens", "total_tokens")


def _tokens(usage: dict[str, Any] | None, name: str) -> int:
    value = (usage or {}).get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


@dataclass
class ModelUsage:
    """Per model id: `{"prompt_tokens", "completion_tokens", "total_tokens", "calls"}` (+ `"partial": True`)."""

    models: dict[str, dict[str, Any]] = field(default_factory=dict)

    def record(self, model_id: str, usage: dict[str, Any] | None, *, partial: bool = False) -> None:
        tally = self.models.setdefault(model_id, dict.fromkeys(TOKEN_FIELDS, 0) | {"calls": 0})
        for name in TOKEN_FIELDS:
            tally[name] += _tokens(usage, name)
        tally["calls"] += 1
        if partial:
            tally["partial"] = True

    def as_usage(self) -> dict[str, Any]:
        """The figures as stored under `Run.usage["host"]`."""
        totals = {name: sum(tally[name] for tally in self.models.values()) for name in TOKEN_FIELDS}
        return {"models": {model_id: dict(tally) for model_id, tally in self.models.items()}, **totals}


def usage_with_host(runner_usage: dict[str, Any] | None, host: ModelUsage) -> dict[str, Any] | None:
    """The runner's reported usage as it is, with the host's own figures under `"host"` when any call was made.
    A runner cannot forge them: its own `"host"` key is replaced."""
    reported = {name: value for name, value in (runner_usage or {}).items() if name != "host"}
    if not host.models:
        return reported if runner_usage is not None else None
    return {**reported, "host": host.as_usage()}
