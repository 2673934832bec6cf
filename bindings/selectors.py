"""Reads for workspaces, API keys, bots and bindings, and the binding resolver (which bindings handle an
event)."""

from __future__ import annotations

import hmac
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import connection
from django.db.models import Q, QuerySet

from bindings.api_keys import API_KEY_PREFIX, api_key_secret_digest
from bindings.models import AgentBinding, ApiKey, Bot, RunnerDescriptor, Workspace
from bindings.runner_config import runner_config_masked
from bindings.sql import binding_versions
from bindings.triggers import TriggerContext, trigger_filter
from foundation.crypto import SECRET_MASK
from foundation.outbound import host_private_allowed


def api_key_by_plaintext(*, key: str) -> ApiKey | None:
    """The active key matching `key`, or None. Comparison is constant-time."""
    parts = key.split("_", 2)
    if len(parts) != 3 or parts[0] != API_KEY_PREFIX:
        return None
    _, prefix, secret = parts
    api_key = ApiKey.objects.select_related("workspace").filter(prefix=prefix, revoked_at__isnull=True).first()
    if api_key is None or not hmac.compare_digest(api_key.secret_sha256, api_key_secret_digest(secret)):
        return None
    return api_key


# --- workspaces of a caller ----------------------------------------------------------------------------


class WorkspaceChoiceError(Exception):
    """The caller's workspace cannot be determined; `status` says how to answer (400, 403 or 404)."""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


def workspace_private_addresses_allowed(*, workspace: Workspace) -> bool:
    """Whether the outbound guard lets this workspace's URLs reach private addresses: the host-wide switch
    (`LANGBOT_ALLOW_PRIVATE_ADDRESSES` or an alias) or the workspace's own flag, both an operator's."""
    return host_private_allowed() or workspace.allow_private_addresses


def workspaces_of_member(*, user_id: int | None) -> QuerySet[Workspace]:
    """The workspaces a user belongs to (none for an anonymous user): what a staff member sees in admin."""
    return Workspace.objects.filter(memberships__user_id=user_id or 0)


def workspace_for_user(*, user: AbstractBaseUser, requested_slug: str | None) -> Workspace:
    """The workspace a session user acts in: their only one, or `requested_slug` among theirs.

    Superusers may act in any workspace by naming it.
    """
    if requested_slug:
        queryset = Workspace.objects.all()
        if not getattr(user, "is_superuser", False):
            queryset = queryset.filter(memberships__user_id=user.pk or 0)
        workspace = queryset.filter(slug=requested_slug).first()
        if workspace is None:
            raise WorkspaceChoiceError(404, "not_found", f"No workspace {requested_slug!r} of yours.")
        return workspace
    workspaces = list(Workspace.objects.filter(memberships__user_id=user.pk).order_by("slug")[:2])
    if not workspaces:
        raise WorkspaceChoiceError(403, "forbidden", "You are not a member of any workspace.")
    if len(workspaces) > 1:
        raise WorkspaceChoiceError(
            400, "invalid_argument", "You belong to several workspaces: say which with ?workspace=<slug>."
        )
    return workspaces[0]


# --- bots and bindings ---------------------------------------------------------------------------------


def bot_list(*, workspace: Workspace) -> QuerySet[Bot]:
    return Bot.objects.filter(workspace=workspace).order_by("bot_id")


def bot_get(*, workspace: Workspace, bot_id: str) -> Bot | None:
    return Bot.objects.filter(workspace=workspace, bot_id=bot_id).first()


def bot_credentials_masked(bot: Bot) -> dict[str, str]:
    return dict.fromkeys(bot.credentials or {}, SECRET_MASK)


def binding_list(
    *, workspace: Workspace, enabled: bool | None = None, runner_id: str | None = None
) -> QuerySet[AgentBinding]:
    queryset = AgentBinding.objects.filter(workspace=workspace)
    if enabled is not None:
        queryset = queryset.filter(enabled=enabled)
    if runner_id:
        queryset = queryset.filter(runner_id=runner_id)
    return queryset.select_related("workspace").order_by("binding_id")


def binding_get(*, workspace: Workspace, binding_id: str) -> AgentBinding | None:
    return AgentBinding.objects.filter(workspace=workspace, binding_id=binding_id).select_related("workspace").first()


def binding_runner_config_masked(binding: AgentBinding) -> dict[str, Any]:
    """The binding's runner config as admin and API show it: secrets replaced by the mask."""
    return runner_config_masked(plain=binding.runner_config or {}, secrets=binding.runner_secrets or {})


# --- resolution ----------------------------------------------------------------------------------------

# The more specific scope answers: a bot's own binding beats its workspace's, which beats a global one.
SCOPE_SPECIFICITY = {
    AgentBinding.ScopeType.BOT.value: 3,
    AgentBinding.ScopeType.WORKSPACE.value: 2,
    AgentBinding.ScopeType.GLOBAL.value: 1,
}


@dataclass(frozen=True)
class BindingResolution:
    """Which bindings handle one event.

    `replying` answers the user; `observers` (`enable_reply: false`) run beside it and never post.
    `conflict` lists the binding ids tied for replying (same scope level, same priority): then nothing
    runs at all, not even observers, and the caller records a visible `binding.conflict` error — a
    half-handled event would hide the misconfiguration. `strip_prefix` is the group prefix the replying
    binding's trigger filter matched and removes from the text ("" for none).
    """

    replying: AgentBinding | None = None
    observers: list[AgentBinding] = field(default_factory=list)
    conflict: list[str] = field(default_factory=list)
    strip_prefix: str = ""

    @property
    def to_run(self) -> list[AgentBinding]:
        """Every binding that gets a run, the replying one first."""
        if self.conflict:
            return []
        return [*([self.replying] if self.replying else []), *self.observers]


def event_type_matches(pattern: str, event_type: str) -> bool:
    """`*` matches everything, `message.*` every event type under `message.`, otherwise equality."""
    if pattern == "*":
        return True
    if pattern.endswith(".*"):
        return event_type.startswith(pattern[:-1])
    return pattern == event_type


def _scope_matches(binding: AgentBinding, *, workspace: Workspace, bot_id: str | None) -> bool:
    if binding.scope_type == AgentBinding.ScopeType.BOT:
        return bot_id is not None and binding.workspace_id == workspace.pk and binding.scope_id == bot_id
    if binding.scope_type == AgentBinding.ScopeType.WORKSPACE:
        return binding.workspace_id == workspace.pk
    return binding.scope_type == AgentBinding.ScopeType.GLOBAL


def _rank(binding: AgentBinding) -> tuple[int, int, str, bool]:
    # Sorts best first; the id (then workspace-owned before global) only makes the order deterministic.
    return (
        -SCOPE_SPECIFICITY.get(binding.scope_type, 0),
        -binding.priority,
        binding.binding_id,
        binding.workspace_id is None,
    )


def binding_resolve_for_event(
    *, workspace: Workspace, event_type: str, bot_id: str | None, trigger: TriggerContext | None = None
) -> BindingResolution:
    """Choose the bindings of `workspace` (and host-wide global ones) that handle an event."""
    candidates = binding_candidates(workspace=workspace)
    return bindings_choose(candidates, workspace=workspace, event_type=event_type, bot_id=bot_id, trigger=trigger)


# The resolver runs for every event. On PostgreSQL the candidate bindings are kept per process and
# reused while the (id, xmin) pairs of the candidate rows are unchanged: any write to a binding row
# (save, queryset update, enable/disable) changes its xmin, an added or deleted binding changes the set,
# so a change is seen by the next event exactly as without the cache. Loading bindings is what costs
# (model instances, decrypting secrets); the version query is one index scan.
_CACHE_MAX_WORKSPACES = 1024
_candidates_cache: dict[int, tuple[tuple[tuple[int, str], ...], list[AgentBinding]]] = {}
_candidates_lock = threading.Lock()


def bindings_visible(*, workspace: Workspace) -> QuerySet[AgentBinding]:
    """The bindings a workspace sees: its own and the global ones (enabled or not)."""
    return AgentBinding.objects.filter(
        Q(workspace=workspace) | Q(workspace__isnull=True, scope_type=AgentBinding.ScopeType.GLOBAL)
    )


def binding_candidates(*, workspace: Workspace) -> list[AgentBinding]:
    """The enabled bindings of `workspace` and the enabled global ones: what the resolver chooses from
    (`bindings_choose`). Shared, cached instances: read them, never change them."""

    def queryset() -> QuerySet[AgentBinding]:
        return bindings_visible(workspace=workspace).filter(enabled=True)

    if connection.vendor != "postgresql":
        return list(queryset())
    # A prepared statement: it runs for every event, and planning it costs more than running it.
    rows = binding_versions(workspace_id=workspace.pk).fetchall()
    versions = tuple((int(pk), str(xmin)) for pk, xmin in rows)
    with _candidates_lock:
        cached = _candidates_cache.get(workspace.pk)
    if cached is not None and cached[0] == versions:
        return cached[1]
    # Versions were read before the rows: a binding changed in between only makes the next event reload.
    bindings = list(queryset().order_by("id"))
    with _candidates_lock:
        if len(_candidates_cache) >= _CACHE_MAX_WORKSPACES:
            _candidates_cache.clear()
        _candidates_cache[workspace.pk] = (versions, bindings)
    return bindings


def bindings_choose(
    bindings: Iterable[AgentBinding],
    *,
    workspace: Workspace,
    event_type: str,
    bot_id: str | None,
    trigger: TriggerContext | None = None,
) -> BindingResolution:
    """The resolution rules over any set of bindings (the resolver's query only narrows the set).

    Candidates are enabled, belong to the workspace or are global, match the event type and the scope,
    and — given the event's `trigger` context — their trigger filter accepts the event (without one, as
    for the web chat's "who would answer" list, filters are not consulted). Among the replying ones the
    most specific scope wins, then the highest priority; a tie at the top is a conflict. The order of
    `bindings` never matters.
    """
    in_scope = (
        b
        for b in bindings
        if b.enabled
        and (b.workspace_id == workspace.pk or (b.workspace_id is None and b.scope_type == "global"))
        and any(event_type_matches(p, event_type) for p in b.event_types or [])
        and _scope_matches(b, workspace=workspace, bot_id=bot_id)
    )
    accepted: list[AgentBinding] = []
    strips: dict[int, str] = {}  # by id(): the candidates are shared instances, one object per binding
    for binding in in_scope:
        match = trigger_filter(binding.trigger_policy).check(trigger) if trigger is not None else None
        if trigger is None or match is not None:
            accepted.append(binding)
            strips[id(binding)] = match.strip if match is not None else ""
    matching = sorted(accepted, key=_rank)
    repliers = [b for b in matching if b.replies]
    observers = [b for b in matching if not b.replies]
    if not repliers:
        return BindingResolution(observers=observers)
    top = repliers[0]
    tied = [b for b in repliers if _level(b) == _level(top)]
    if len(tied) > 1:
        return BindingResolution(conflict=sorted(b.binding_id for b in tied))
    return BindingResolution(replying=top, observers=observers, strip_prefix=strips[id(top)])


def _level(binding: AgentBinding) -> tuple[int, int]:
    return SCOPE_SPECIFICITY.get(binding.scope_type, 0), binding.priority


# --- the runner catalog ---------------------------------------------------------------------------------


def runner_descriptors_visible(*, workspace_ids: Iterable[int] = ()) -> QuerySet[RunnerDescriptor]:
    """Runners of every workspace, and the development runners of these workspaces only."""
    return RunnerDescriptor.objects.filter(Q(workspace__isnull=True) | Q(workspace_id__in=list(workspace_ids)))


def runner_descriptor_list(*, workspace: Workspace | None, status: str | None = None) -> QuerySet[RunnerDescriptor]:
    queryset = runner_descriptors_visible(workspace_ids=[workspace.pk] if workspace is not None else [])
    if status:
        queryset = queryset.filter(status=status)
    return queryset


def runner_descriptor_get(*, runner_id: str) -> RunnerDescriptor | None:
    return RunnerDescriptor.objects.filter(runner_id=runner_id).first()
