"""The run session: the authorization snapshot frozen when a run starts (docs/security.md, "Runner code") and the check
every proxy call goes through.

The snapshot is stored on `Run.authorization` (for audit and for any process that has to check a call)
and held in memory by the worker that runs the run. A run id is accepted only while its run is
`running`; once the run ends, its session is gone and every call answers `unauthorized`.

Each session carries a run token: an unguessable credential made when the session is built, sent to the
runtime with `run_agent` only, never stored and never shown to the runner. A proxy call is served only for
the run its token was issued to, so knowing another run's id is worth nothing.
"""

from __future__ import annotations

import secrets
import uuid
from dataclasses import dataclass, field
from typing import Any

from langbot_sdk.protocol import AgentResources, ContextAPICapabilities, StateScope
from runners.access.scope import RunScope
from runners.access.usage import ModelUsage
from runners.models import Run


@dataclass(frozen=True)
class HistoryGrant:
    """The other conversations of its workspace whose history a run may read (the binding's
    `ResourcePolicy.history_conversations` / `history_same_actor`, frozen at start): by id (`*`: any), or
    any in which the run's actor took part. Empty: only its own conversation."""

    conversations: frozenset[str] = frozenset()
    same_actor: bool = False

    def __bool__(self) -> bool:
        return bool(self.conversations) or self.same_actor

    def as_dict(self) -> dict[str, Any]:
        return {"conversations": sorted(self.conversations), "same_actor": self.same_actor}

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> HistoryGrant:
        data = data or {}
        return cls(conversations=frozenset(data.get("conversations") or ()), same_actor=bool(data.get("same_actor")))


@dataclass
class RunSession:
    run_id: str
    run_pk: int
    lease_token: str
    plugin_identity: str
    scope: RunScope
    resources: AgentResources
    available_apis: ContextAPICapabilities
    state_enabled: bool
    state_scopes: frozenset[str] = field(default_factory=frozenset)
    # Whether the run's results will stream (the runner declares `streaming` and the delivery takes deltas):
    # stored with the snapshot so the runs API, the chat and the platforms know whether to expect deltas.
    streams: bool = True
    history_grant: HistoryGrant = field(default_factory=HistoryGrant)
    # Not part of `authorization()`: a token written to the database could be replayed by whoever reads it.
    run_token: str = field(default_factory=lambda: secrets.token_urlsafe(32), repr=False)
    # The model calls' token usage as the host counted it; stored with the run when it ends.
    usage: ModelUsage = field(default_factory=ModelUsage, repr=False)

    def authorization(self) -> dict[str, Any]:
        """The snapshot as stored on `Run.authorization`."""
        return {
            "resources": self.resources.model_dump(mode="json"),
            "available_apis": self.available_apis.model_dump(mode="json"),
            "scope": self.scope.as_dict(),
            "state_policy": {"enable_state": self.state_enabled, "state_scopes": sorted(self.state_scopes)},
            "plugin_identity": self.plugin_identity,
            "delivery": {"streaming": self.streams},
            "history_grant": self.history_grant.as_dict(),
        }

    @classmethod
    def from_authorization(cls, *, run_id: str, run_pk: int, lease_token: str, data: dict[str, Any]) -> RunSession:
        policy = data.get("state_policy") or {}
        return cls(
            run_id=run_id,
            run_pk=run_pk,
            lease_token=lease_token,
            plugin_identity=str(data.get("plugin_identity") or ""),
            scope=RunScope.from_dict(data.get("scope") or {}),
            resources=AgentResources.model_validate(data.get("resources") or {}),
            available_apis=ContextAPICapabilities.model_validate(data.get("available_apis") or {}),
            state_enabled=bool(policy.get("enable_state")),
            state_scopes=frozenset(policy.get("state_scopes") or ()),
            streams=bool((data.get("delivery") or {}).get("streaming", True)),
            history_grant=HistoryGrant.from_dict(data.get("history_grant")),
        )

    def state_allows(self, scope: StateScope | str) -> bool:
        return self.state_enabled and str(scope) in self.state_scopes


def run_session_active(run_id: str) -> Run | None:
    """The run if it is running now (the only time its run id is accepted by the proxy), else None."""
    try:
        key = uuid.UUID(str(run_id))
    except ValueError:
        return None
    return Run.objects.filter(run_id=key, status=Run.Status.RUNNING).first()
