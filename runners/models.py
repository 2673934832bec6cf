"""Runs and the run ledger (the runner catalog, `RunnerDescriptor`, lives in `bindings.models`; the
development tokens and sessions in `runtimes.models`).

The database is the source of truth for a run's fate (docs/architecture.md, "Runs"): `Run.status` moves only forward,
by conditional updates, and `RunEvent` rows are the persisted result stream that every client
(WebSocket, SSE, `?wait=`) replays from.
"""

from __future__ import annotations

import uuid

from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from bindings.models import AgentBinding, Bot, Workspace
from foundation.tracing import run_trace_id_new
from transcripts.models import EventLog


class Run(models.Model):
    class Status(models.TextChoices):
        QUEUED = "queued", _("Queued")
        RUNNING = "running", _("Running")
        COMPLETED = "completed", _("Completed")
        FAILED = "failed", _("Failed")
        CANCELLED = "cancelled", _("Cancelled")
        TIMEOUT = "timeout", _("Timeout")

    TERMINAL_STATUSES = (Status.COMPLETED, Status.FAILED, Status.CANCELLED, Status.TIMEOUT)
    ACTIVE_STATUSES = (Status.QUEUED, Status.RUNNING)

    run_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False, verbose_name=_("run id"))
    # The run's OpenTelemetry trace (32 hex digits): the inbound request's when it was traced, else a fresh id
    # (foundation/tracing.py). Runs from before it existed have none; `trace_hex` falls back to the run id.
    trace_id = models.CharField(
        max_length=32, blank=True, default=run_trace_id_new, editable=False, verbose_name=_("trace id")
    )
    workspace = models.ForeignKey(
        Workspace, on_delete=models.CASCADE, related_name="runs", db_index=False, verbose_name=_("workspace")
    )
    event = models.ForeignKey(EventLog, on_delete=models.CASCADE, related_name="runs", verbose_name=_("event"))
    binding = models.ForeignKey(
        AgentBinding, on_delete=models.SET_NULL, null=True, blank=True, related_name="runs", verbose_name=_("binding")
    )
    # Snapshots: the run keeps its identity even if the binding is edited or deleted later.
    binding_key = models.CharField(max_length=64, verbose_name=_("binding key"))
    runner_id = models.CharField(max_length=255, verbose_name=_("runner id"))
    bot = models.ForeignKey(
        Bot, on_delete=models.SET_NULL, null=True, blank=True, related_name="runs", verbose_name=_("bot")
    )
    conversation_id = models.CharField(max_length=255, blank=True, verbose_name=_("conversation id"))
    thread_id = models.CharField(max_length=255, blank=True, verbose_name=_("thread id"))
    # Observers run beside the replying binding and never post replies.
    is_observer = models.BooleanField(default=False, verbose_name=_("is observer"))

    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED, verbose_name=_("status"))
    status_reason = models.CharField(max_length=200, blank=True, verbose_name=_("status reason"))
    error = models.JSONField(null=True, blank=True, verbose_name=_("error"))
    usage = models.JSONField(null=True, blank=True, verbose_name=_("usage"))
    output = models.TextField(blank=True, verbose_name=_("output"))

    timeout_seconds = models.PositiveIntegerField(default=300, verbose_name=_("timeout seconds"))
    deadline_at = models.DateTimeField(null=True, blank=True, verbose_name=_("deadline at"))
    # Frozen at run start (docs/security.md, "Runner code"): every proxy call of this run is checked against it.
    authorization = models.JSONField(null=True, blank=True, verbose_name=_("authorization"))
    # The lease: one worker owns a running run until `lease_expires_at`, renewed by heartbeat.
    lease_owner = models.CharField(max_length=200, blank=True, verbose_name=_("lease owner"))
    lease_token = models.UUIDField(null=True, blank=True, verbose_name=_("lease token"))
    lease_expires_at = models.DateTimeField(null=True, blank=True, verbose_name=_("lease expires at"))
    attempts = models.PositiveSmallIntegerField(default=0, verbose_name=_("attempts"))
    last_seq = models.PositiveIntegerField(default=0, verbose_name=_("last seq"))
    cancel_requested_at = models.DateTimeField(null=True, blank=True, verbose_name=_("cancel requested at"))
    cancel_reason = models.CharField(max_length=200, blank=True, verbose_name=_("cancel reason"))
    # Chat bursts (the `merge` and `steer` concurrency policies): a queued run is not claimed before
    # `not_before` (the quiet window after its latest message), and `input_events` are the ids of the later
    # events whose messages it takes as input, in order — folded in before it started, or handed to it
    # while it ran. Both live here, not in a process, so a restart loses neither.
    not_before = models.DateTimeField(null=True, blank=True, verbose_name=_("not before"))
    input_events = models.JSONField(default=list, blank=True, verbose_name=_("input events"))

    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))
    started_at = models.DateTimeField(null=True, blank=True, verbose_name=_("started at"))
    finished_at = models.DateTimeField(null=True, blank=True, verbose_name=_("finished at"))

    class Meta:
        verbose_name = _("run")
        verbose_name_plural = _("runs")
        ordering = ["-id"]
        # The run hot path (claim, run end) runs prepared statements on pooled connections, which keep
        # the plan made while the table was young and had no statistics. Such a plan takes the smallest
        # index with a matching column: with a workspace-only or status-leading index it read every run of
        # the workspace, or every queued run, at each claim and each run's end. So the indexes of active
        # runs are partial — they hold only queued or running runs, stay small whatever the host's history,
        # and a statement can use them only when it names those statuses as literals — and the workspace
        # has no index of its own (`run_conversation_idx` leads with it).
        indexes = [
            models.Index(fields=["workspace", "conversation_id", "status"], name="run_conversation_idx"),
            # The conversation checks: `queue` claim, next queued run, `reject`, `interrupt`, sweep.
            models.Index(
                fields=["workspace", "conversation_id", "binding"],
                name="run_active_idx",
                condition=Q(status__in=["queued", "running"]),
            ),
            # The sweep: expired leases, runs left queued.
            models.Index(fields=["lease_expires_at"], name="run_lease_idx", condition=Q(status="running")),
            models.Index(fields=["created_at"], name="run_queue_idx", condition=Q(status="queued")),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=["queued", "running", "completed", "failed", "cancelled", "timeout"]),
                name="run_status_valid",
            )
        ]

    def __str__(self) -> str:
        return f"run {self.run_id} ({self.status})"

    @property
    def is_terminal(self) -> bool:
        return self.status in self.TERMINAL_STATUSES

    @property
    def trace_hex(self) -> str:
        """The run's trace id, also for a run recorded before runs had one (its run id: 32 hex digits too)."""
        return self.trace_id or self.run_id.hex


class RunEvent(models.Model):
    """One persisted result of a run. `seq` is 1..n per run; `id` is the global cursor WebSocket clients
    resume from. `position` is 1..n per conversation (`ConversationStream`), taken in the transaction that
    inserts the row: within a conversation, positions, ids and commit order agree (`runners.live.streaming`
    says why that makes `id` an exact resume cursor). NULL for a run without a conversation, and for rows
    written before positions existed."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="events", verbose_name=_("run"))
    seq = models.PositiveIntegerField(verbose_name=_("seq"))
    position = models.BigIntegerField(null=True, blank=True, verbose_name=_("position"))
    type = models.CharField(max_length=64, verbose_name=_("type"))
    data = models.JSONField(default=dict, verbose_name=_("data"))
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))

    class Meta:
        verbose_name = _("run event")
        verbose_name_plural = _("run events")
        ordering = ["run", "seq"]
        constraints = [models.UniqueConstraint(fields=["run", "seq"], name="uniq_run_event_seq")]

    def __str__(self) -> str:
        return f"{self.run_id}#{self.seq} {self.type}"


class ConversationStream(models.Model):
    """The position counter of one conversation's run events: `last_position` is the position of its newest
    run event. A result write raises it by the number of events it inserts, in its own transaction and
    before inserting them, so the row lock it takes orders the conversation's writers: the next writer takes
    its positions (and its ids) only once the previous one has committed."""

    workspace_id = models.BigIntegerField(verbose_name=_("workspace id"))
    conversation_id = models.CharField(max_length=255, verbose_name=_("conversation id"))
    last_position = models.BigIntegerField(default=0, verbose_name=_("last position"))

    class Meta:
        verbose_name = _("conversation stream")
        verbose_name_plural = _("conversation streams")
        constraints = [
            models.UniqueConstraint(fields=["workspace_id", "conversation_id"], name="uniq_conversation_stream")
        ]

    def __str__(self) -> str:
        return f"{self.workspace_id}:{self.conversation_id} @{self.last_position}"


class ProxyCallAudit(models.Model):
    """One proxy call of a run, allowed or refused (every call is audited: docs/security.md, "Runner code").

    Written in batches by `runners.access.audit.AuditLog`, off the call's path. `run_id` is a plain id, not a
    foreign key, so a call naming an unknown or finished run is audited too.
    """

    run_id = models.CharField(max_length=64, db_index=True, verbose_name=_("run id"))
    runner_id = models.CharField(max_length=255, blank=True, db_index=True, verbose_name=_("runner id"))
    workspace_id = models.BigIntegerField(null=True, blank=True, verbose_name=_("workspace id"))
    action = models.CharField(max_length=64, verbose_name=_("action"))
    resource = models.CharField(max_length=300, blank=True, verbose_name=_("resource"))
    scope = models.CharField(max_length=300, blank=True, verbose_name=_("scope"))
    """The conversation (and thread) the call was confined to."""
    caller = models.CharField(max_length=200, blank=True, verbose_name=_("caller"))
    outcome = models.CharField(max_length=32, verbose_name=_("outcome"))
    """`ok`, or the error code of a refused or failed call."""
    duration_ms = models.FloatField(default=0.0, verbose_name=_("duration ms"))
    created_at = models.DateTimeField(db_index=True, verbose_name=_("created at"))

    class Meta:
        verbose_name_plural = _("proxy calls")
        ordering = ["-id"]
        indexes = [
            models.Index(fields=["action", "outcome", "-id"], name="audit_action_outcome_idx"),
        ]
        verbose_name = _("proxy call")

    def __str__(self) -> str:
        return f"{self.action} {self.outcome} (run {self.run_id})"


class PlatformActionRequest(models.Model):
    """A platform action a runner asked for (`api.platform.request_action` or an `action.requested`
    result) and what became of it. It executes only when the manifest, the binding policy and — when the
    binding requires it — an operator's approval in admin allow it."""

    class Origin(models.TextChoices):
        PROXY = "proxy", "api.platform.request_action"
        RESULT = "result", _("action.requested result")

    class Status(models.TextChoices):
        PENDING = "pending_approval", _("waiting for approval")
        EXECUTED = "executed", _("executed")
        REFUSED = "refused", _("refused (not authorized)")
        REJECTED = "rejected", _("rejected by an operator")
        FAILED = "failed", _("failed")
        EXPIRED = "expired", _("expired (not decided in time, or its run ended)")

    workspace = models.ForeignKey(
        Workspace, on_delete=models.CASCADE, related_name="platform_actions", verbose_name=_("workspace")
    )
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="platform_actions", verbose_name=_("run"))
    runner_id = models.CharField(max_length=255, verbose_name=_("runner id"))
    binding_key = models.CharField(max_length=64, verbose_name=_("binding key"))
    surface = models.CharField(max_length=32, blank=True, verbose_name=_("surface"))
    action = models.CharField(max_length=100, verbose_name=_("action"))
    target = models.JSONField(default=dict, blank=True, verbose_name=_("target"))
    payload = models.JSONField(default=dict, blank=True, verbose_name=_("payload"))
    origin = models.CharField(max_length=16, choices=Origin.choices, verbose_name=_("origin"))
    status = models.CharField(max_length=20, choices=Status.choices, verbose_name=_("status"))
    error = models.JSONField(null=True, blank=True, verbose_name=_("error"))
    result = models.JSONField(default=dict, blank=True, verbose_name=_("result"))
    decided_by = models.CharField(max_length=150, blank=True, verbose_name=_("decided by"))
    decided_at = models.DateTimeField(null=True, blank=True, verbose_name=_("decided at"))
    executed_at = models.DateTimeField(null=True, blank=True, verbose_name=_("executed at"))
    expires_at = models.DateTimeField(null=True, blank=True, verbose_name=_("expires at"))
    """A pending request not decided by then expires; without `may_outlive_run` never later than its run."""
    may_outlive_run = models.BooleanField(default=False, verbose_name=_("may outlive run"))
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))

    class Meta:
        verbose_name = _("platform action request")
        verbose_name_plural = _("platform action requests")
        ordering = ["-id"]
        indexes = [models.Index(fields=["status", "-id"], name="platform_action_status_idx")]

    def __str__(self) -> str:
        return f"{self.action} ({self.status})"


class Budget(models.Model):
    """A spending limit on model calls: of a whole workspace, of one bot, or of one actor (or each actor,
    when `actor_id` is empty), per UTC day or month, in the host's cost currency. While what was spent in
    the current period has reached `amount`, runs it applies to do not start and their model calls are
    refused (`quota_exceeded`); the next period starts from nothing (runners/access/budgets.py)."""

    class Scope(models.TextChoices):
        WORKSPACE = "workspace", _("the whole workspace")
        BOT = "bot", _("one bot")
        ACTOR = "actor", _("one actor (or each actor)")

    class Period(models.TextChoices):
        DAY = "day", _("per UTC day")
        MONTH = "month", _("per UTC month")

    budget_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False, verbose_name=_("budget id"))
    workspace = models.ForeignKey(
        Workspace, on_delete=models.CASCADE, related_name="budgets", verbose_name=_("workspace")
    )
    scope = models.CharField(max_length=16, choices=Scope.choices, default=Scope.WORKSPACE, verbose_name=_("scope"))
    bot = models.ForeignKey(
        Bot,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="budgets",
        help_text=_("For a bot budget."),
        verbose_name=_("bot"),
    )
    actor_id = models.CharField(
        max_length=255,
        blank=True,
        help_text=_("For an actor budget: `type:id` as runs name actors (e.g. user:42); empty: each actor alike."),
        verbose_name=_("actor id"),
    )
    period = models.CharField(max_length=8, choices=Period.choices, default=Period.DAY, verbose_name=_("period"))
    amount = models.DecimalField(
        max_digits=14, decimal_places=6, help_text=_("In the host's cost currency."), verbose_name=_("amount")
    )
    enabled = models.BooleanField(default=True, verbose_name=_("enabled"))
    name = models.CharField(max_length=200, blank=True, verbose_name=_("name"))
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))
    updated_at = models.DateTimeField(auto_now=True, verbose_name=_("updated at"))

    class Meta:
        verbose_name = _("budget")
        verbose_name_plural = _("budgets")
        ordering = ["workspace", "scope", "id"]
        indexes = [models.Index(fields=["workspace", "enabled"], name="budget_workspace_idx")]
        constraints = [
            models.CheckConstraint(
                condition=(Q(scope="bot") & Q(bot__isnull=False)) | (~Q(scope="bot") & Q(bot__isnull=True)),
                name="budget_bot_iff_bot_scope",
            ),
            models.CheckConstraint(condition=Q(scope="actor") | Q(actor_id=""), name="budget_actor_only_actor_scope"),
            models.CheckConstraint(condition=Q(amount__gte=0), name="budget_amount_not_negative"),
        ]

    def __str__(self) -> str:
        return self.name or f"{self.scope} budget {self.amount}/{self.period}"


class DailySpend(models.Model):
    """What model calls cost, per workspace, UTC day, bot and actor (`""` for none): raised by each call as
    it ends, so a budget sees what running runs have spent too. Keys are the names a run had (the bot's
    `bot_id`, the actor's `type:id`), kept when the bot is deleted. Tokens of unpriced models are counted
    here as well; their cost is zero."""

    workspace = models.ForeignKey(
        Workspace, on_delete=models.CASCADE, related_name="daily_spend", verbose_name=_("workspace")
    )
    day = models.DateField(verbose_name=_("day"))
    bot_key = models.CharField(max_length=64, blank=True, verbose_name=_("bot key"))
    actor_key = models.CharField(max_length=255, blank=True, verbose_name=_("actor key"))
    cost = models.DecimalField(max_digits=24, decimal_places=12, default=0, verbose_name=_("cost"))
    prompt_tokens = models.BigIntegerField(default=0, verbose_name=_("prompt tokens"))
    completion_tokens = models.BigIntegerField(default=0, verbose_name=_("completion tokens"))
    calls = models.PositiveIntegerField(default=0, verbose_name=_("calls"))

    class Meta:
        verbose_name = _("daily spend")
        ordering = ["-day", "workspace", "bot_key", "actor_key"]
        verbose_name_plural = _("daily spend")
        constraints = [
            models.UniqueConstraint(
                fields=["workspace", "day", "bot_key", "actor_key"], name="uniq_daily_spend_per_key"
            )
        ]

    def __str__(self) -> str:
        return f"{self.workspace_id} {self.day} {self.bot_key or '-'} {self.actor_key or '-'}: {self.cost}"
