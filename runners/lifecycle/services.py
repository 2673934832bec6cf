"""The run lifecycle services other parts call — `run_create` (with the binding's concurrency policy),
`run_cancel_request`, `runs_wait` (and `runs_wait_async`), `runs_sweep` — and the dispatch of queued
runs to workers after commit.

What happens inside a worker (claim, context, the runtime call, results) lives in `runners.orchestrator`.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import connection, transaction
from django.db.models import Exists, OuterRef, QuerySet
from django.utils import timezone

from bindings.models import AgentBinding, RunnerDescriptor
from bindings.policies import MERGE_MAX_MESSAGES, MERGE_SPAN_FACTOR, ConcurrencyPolicy
from foundation.db import connections_release, read_released
from foundation.sql import insert
from runners.lifecycle.dispatch import run_dispatch, run_dispatch_at, runs_dispatch
from runners.lifecycle.observers import runs_ended
from runners.live.cancel import cancel_notify
from runners.live.publish import RUN_EVENT, RUN_STATUS, run_group, run_status_publish_on_commit
from runners.live.steer import steer_notify
from runners.models import Run
from runners.sql import conversation_lock
from transcripts.models import EventLog

logger = logging.getLogger(__name__)


# --- runs ---------------------------------------------------------------------------------------------

INTERRUPT_REASON = "interrupted by a newer message"
REJECT_REASON = "rejected"
# Why a run that its binding's policy would have handled otherwise waits its turn instead (`Run.status_reason`
# of the queued run, shown by the runs API and the admin; the claim overwrites nothing of it).
QUEUED_NO_INTERRUPT = "queued: the runner does not support interrupt"
QUEUED_NO_STEERING = "queued: the runner does not take input while running"
QUEUED_STEER_BEHIND = "queued: an earlier message is already waiting"
_TERMINAL = frozenset(Run.TERMINAL_STATUSES)
_TERMINAL_RESULTS = frozenset({"run.completed", "run.failed"})


def _same_conversation_active(*, workspace_id: int, binding_id: int, conversation_id: str) -> QuerySet[Run]:
    return Run.objects.filter(
        workspace_id=workspace_id,
        conversation_id=conversation_id,
        binding_id=binding_id,
        status__in=Run.ACTIVE_STATUSES,
    )


def _conversation_lock(*, binding: AgentBinding, conversation_id: str) -> None:
    """Serialize run creation of one binding+conversation until the transaction ends (PostgreSQL only),
    so two concurrent messages cannot both see an idle conversation under `reject`/`interrupt`."""
    if connection.vendor != "postgresql":
        return  # SQLite takes the write lock for the whole transaction anyway.
    conversation_lock(binding_pk=binding.pk, conversation_id=conversation_id).execute()


def run_dispatch_on_commit(*, run_id: str) -> None:
    transaction.on_commit(lambda: run_dispatch(run_id=run_id))


def run_build(*, event: EventLog, binding: AgentBinding, observer: bool) -> Run:
    """The unsaved, queued run of `binding` for `event` (`run_create` saves it and applies the policy)."""
    return Run(
        workspace_id=event.workspace_id,
        event=event,
        binding=binding,
        binding_key=binding.binding_id,
        runner_id=binding.runner_id,
        bot_id=event.bot_id,
        conversation_id=event.conversation_id or "",
        thread_id=event.thread_id or "",
        is_observer=observer,
        timeout_seconds=binding.timeout_seconds,
    )


_CHECKED_POLICIES = frozenset(
    {ConcurrencyPolicy.REJECT, ConcurrencyPolicy.INTERRUPT, ConcurrencyPolicy.MERGE, ConcurrencyPolicy.STEER}
)


def run_create_checks(*, event: EventLog, binding: AgentBinding) -> bool:
    """Whether creating the run must look at the conversation's active runs (`reject`, `interrupt`, `merge`,
    `steer`) under a lock; otherwise the run is a plain insert, which the gateway writes with the event."""
    policy = ConcurrencyPolicy(binding.concurrency_policy)
    return bool(event.conversation_id) and policy in _CHECKED_POLICIES


def runner_capability(*, runner_id: str, name: str) -> bool | None:
    """Whether the runner's manifest, as last synced, declares capability `name`; None when the runner is
    not in the catalog (a run of an unknown runner fails at its claim anyway)."""
    capabilities = RunnerDescriptor.objects.filter(runner_id=runner_id).values_list("capabilities", flat=True).first()
    if not isinstance(capabilities, dict):
        return None
    return capabilities.get(name) is True


def _merge_into(*, active: QuerySet[Run], event: EventLog, binding: AgentBinding, now: datetime) -> Run | None:
    """Fold `event` into the conversation's merging run, if one still takes messages: the newest active run
    is queued under `merge` (it has a `not_before`), holds fewer than `MERGE_MAX_MESSAGES` messages, and its
    window is still open — or it waits behind an earlier run anyway. Each message restarts the window, up to
    `MERGE_SPAN_FACTOR` windows after the first. Returns the run folded into, else None."""
    target = active.order_by("-id").first()
    if target is None or target.status != Run.Status.QUEUED or target.not_before is None:
        return None
    folded = list(target.input_events or [])
    if len(folded) + 1 >= MERGE_MAX_MESSAGES:
        return None
    waiting_behind = active.filter(id__lt=target.pk).exists()
    if target.not_before <= now and not waiting_behind:
        return None  # Its window has closed: it is about to start (or starting) with what it has.
    window = timedelta(seconds=binding.merge_window_seconds)
    not_before = min(now + window, target.created_at + MERGE_SPAN_FACTOR * window)
    folded.append(event.pk)
    # The claim flips `queued` in one update, so a run claimed meanwhile takes nothing more: a message that
    # comes too late for it gets a run of its own.
    if not Run.objects.filter(pk=target.pk, status=Run.Status.QUEUED).update(
        not_before=not_before, input_events=folded
    ):
        return None
    target.not_before, target.input_events = not_before, folded
    return target


def _steer_into(*, active: QuerySet[Run], event: EventLog) -> Run | None:
    """Hand `event` to the conversation's running run as more input: recorded on the run (`input_events`)
    and sent to the worker that holds it once this transaction commits. Only when that run is the only
    active one (a message already queued behind it keeps its place in line)."""
    runs = list(active.order_by("id")[:2])
    if len(runs) != 1 or runs[0].status != Run.Status.RUNNING or runs[0].cancel_requested_at is not None:
        return None
    target = runs[0]
    folded = [*(target.input_events or []), event.pk]
    if not Run.objects.filter(pk=target.pk, status=Run.Status.RUNNING, cancel_requested_at__isnull=True).update(
        input_events=folded
    ):
        return None
    target.input_events = folded
    run_id, event_pk = str(target.run_id), event.pk
    transaction.on_commit(lambda: steer_notify(run_id=run_id, event_pk=event_pk))
    return target


def run_create(*, event: EventLog, binding: AgentBinding, observer: bool) -> Run:
    """Create the run of `binding` for `event` inside the caller's transaction, applying the binding's
    concurrency policy for the event's conversation (docs/architecture.md, "Runs"):

    - `queue` (default): the run stays queued until earlier active runs of the same binding and
      conversation have ended (the worker will not claim it before; the run that ends sends the next);
    - `interrupt`: earlier active runs get a cancel request ("interrupted by a newer message");
    - `reject`: while an earlier run is active, the new run is created already `failed`
      (`status_reason` "rejected", error `conversation.busy`) and never runs;
    - `parallel`: no check;
    - `merge`: the run waits `merge_window_seconds` (`not_before`) and messages that arrive meanwhile are
      folded into it (`input_events`) instead of getting runs of their own: the returned run is then that
      earlier run. It queues behind earlier active runs like `queue`, and keeps taking messages while it
      waits;
    - `steer`: while a run is running and its runner declares the `steering` capability, the message is
      handed to that run (returned) as more input; otherwise the run queues, saying why in `status_reason`.

    A runner that does not declare `interrupt` is not interrupted: under `interrupt` the new run queues
    instead (`status_reason` says so). Events without a conversation have nothing to collide with and
    always run. The worker is woken once the transaction commits.
    """
    conversation_id = event.conversation_id or ""
    policy = ConcurrencyPolicy(binding.concurrency_policy)
    run = run_build(event=event, binding=binding, observer=observer)
    if policy is ConcurrencyPolicy.MERGE and conversation_id:
        run.not_before = timezone.now() + timedelta(seconds=binding.merge_window_seconds)
    if run_create_checks(event=event, binding=binding):
        _conversation_lock(binding=binding, conversation_id=conversation_id)
        active = _same_conversation_active(
            workspace_id=event.workspace_id, binding_id=binding.pk, conversation_id=conversation_id
        )
        if policy is ConcurrencyPolicy.MERGE:
            merged = _merge_into(active=active, event=event, binding=binding, now=timezone.now())
            if merged is not None:
                return merged
        if policy is ConcurrencyPolicy.STEER and active.exists():
            if runner_capability(runner_id=binding.runner_id, name="steering") is not True:
                run.status_reason = QUEUED_NO_STEERING
            else:
                steered = _steer_into(active=active, event=event)
                if steered is not None:
                    return steered
                run.status_reason = QUEUED_STEER_BEHIND
        if policy is ConcurrencyPolicy.REJECT and active.exists():
            now = timezone.now()
            run.status = Run.Status.FAILED
            run.status_reason = REJECT_REASON
            run.error = {
                "code": "conversation.busy",
                "message": "another run of this binding is active in the conversation",
                "retryable": True,
                "details": {"concurrency_policy": policy.value},
            }
            run.finished_at = now
            run.save()
            run_status_publish_on_commit(run=run)
            runs_ended(runs=[run])
            return run
        if policy is ConcurrencyPolicy.INTERRUPT and active.exists():
            # Only a runner known to refuse it is spared; an unknown runner's run fails at its claim.
            if runner_capability(runner_id=binding.runner_id, name="interrupt") is not False:
                for earlier in active.order_by("id"):
                    run_cancel_request(run=earlier, reason=INTERRUPT_REASON)
            else:
                run.status_reason = QUEUED_NO_INTERRUPT
    insert(run)
    if run.not_before is not None:
        run_id, eta = str(run.run_id), run.not_before
        transaction.on_commit(lambda: run_dispatch_at(run_id=run_id, eta=eta))
    else:
        run_dispatch_on_commit(run_id=str(run.run_id))
    return run


def run_waits_its_turn(*, run: Run, binding: AgentBinding, interruptible: bool) -> bool:
    """Whether claiming `run` must wait until no earlier run of its binding and conversation is active:
    under `queue`, `merge` and `steer` (a steering message that became a run of its own queues), and
    under `interrupt` when the runner cannot be interrupted (the earlier run was left running)."""
    if not run.conversation_id:
        return False
    policy = ConcurrencyPolicy(binding.concurrency_policy)
    if policy is ConcurrencyPolicy.INTERRUPT:
        return not interruptible
    return policy in (ConcurrencyPolicy.QUEUE, ConcurrencyPolicy.MERGE, ConcurrencyPolicy.STEER)


def run_cancel_request(*, run: Run, reason: str) -> Run:
    """Cancel a run. Queued → `cancelled` at once; running → `cancel_requested_at` is set and the owning
    worker is told to send `cancel_run` (the run ends `cancelled` when the runner stops); terminal →
    unchanged. Idempotent: a second request changes nothing. Returns the run as stored now."""
    reason = (reason or "cancelled")[:200]
    now = timezone.now()
    with transaction.atomic():
        cancelled = Run.objects.filter(pk=run.pk, status=Run.Status.QUEUED).update(
            status=Run.Status.CANCELLED,
            status_reason=reason,
            cancel_requested_at=now,
            cancel_reason=reason,
            finished_at=now,
        )
        if cancelled:
            run.refresh_from_db()
            run_status_publish_on_commit(run=run)
            runs_ended(runs=[run])
            # A queued run may have been the one later runs of its conversation were waiting behind.
            run_dispatch_next_on_commit(run=run)
            return run
        requested = Run.objects.filter(pk=run.pk, status=Run.Status.RUNNING, cancel_requested_at__isnull=True).update(
            cancel_requested_at=now, cancel_reason=reason
        )
        if requested:
            run_id = str(run.run_id)
            transaction.on_commit(lambda: cancel_notify(run_id=run_id, reason=reason))
        run.refresh_from_db()
    return run


def run_next_queued(*, run: Run) -> Run | None:
    """The oldest queued run waiting behind `run` under the `queue` policy, if any."""
    if not run.conversation_id or run.binding_id is None:
        return None
    return (
        Run.objects.filter(
            workspace_id=run.workspace_id,
            conversation_id=run.conversation_id,
            binding_id=run.binding_id,
            status=Run.Status.QUEUED,
        )
        .order_by("id")
        .only("run_id")
        .first()
    )


def run_dispatch_next_on_commit(*, run: Run) -> None:
    following = run_next_queued(run=run)
    if following is not None:
        run_dispatch_on_commit(run_id=str(following.run_id))


def runs_wait(*, run_ids: list[str], timeout: float) -> None:
    """Block until every run is terminal or `timeout` seconds pass.

    Subscribes to each run's channel-layer group first, then reads the runs' status once (so a status
    committed in between is never missed), then only listens — it never polls the database. While it
    waits, the calling thread holds no database connection (`foundation.db`): hundreds of `?wait=`
    requests must not take the web process's pool from everyone else.
    """
    if not run_ids or timeout <= 0:
        return
    connections_release()
    async_to_sync(_runs_wait)([str(r) for r in run_ids], float(timeout))


async def runs_wait_async(*, run_ids: list[str], timeout: float) -> None:
    """`runs_wait` for code on the event loop (the caller holds no database connection): the same
    subscription, one status read on a thread, and listening, without a thread around the whole wait.
    The unsubscription is left to the loop, so the caller answers without waiting for its round trip."""
    if run_ids and timeout > 0:
        await _runs_wait([str(r) for r in run_ids], float(timeout), unsubscribe_later=True)


def _is_terminal_message(message: dict[str, Any]) -> bool:
    """A terminal status, or the terminal result event — it is committed together with the final status
    (published just before it), so either one is enough if the other was dropped by a full channel."""
    if message.get("type") == RUN_STATUS:
        return message.get("status") in _TERMINAL
    event = message.get("event")
    return message.get("type") == RUN_EVENT and isinstance(event, dict) and event.get("type") in _TERMINAL_RESULTS


def _runs_still_active(run_ids: list[str]) -> set[str]:
    rows = Run.objects.filter(run_id__in=run_ids).exclude(status__in=Run.TERMINAL_STATUSES)
    return {str(r) for r in rows.values_list("run_id", flat=True)}


_unsubscribing: set[asyncio.Task[None]] = set()


async def _groups_add(layer: Any, groups: list[str], channel: str) -> None:
    # One round trip for all of an event's runs on the host's layer (`runners.live.layers`).
    if hasattr(layer, "groups_add"):
        await layer.groups_add(groups, channel)
        return
    for group in groups:
        await layer.group_add(group, channel)


async def _groups_discard(layer: Any, groups: list[str], channel: str) -> None:
    try:
        if hasattr(layer, "groups_discard"):
            await layer.groups_discard(groups, channel)
            return
        for group in groups:
            await layer.group_discard(group, channel)
    except Exception:
        # The membership expires with the group (channels_redis' group_expiry); a publication to the
        # abandoned channel meanwhile is dropped with it.
        logger.debug("unsubscribing %s from %s failed", channel, groups, exc_info=True)


async def _runs_wait(run_ids: list[str], timeout: float, *, unsubscribe_later: bool = False) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    channel = await layer.new_channel()
    groups = [run_group(run_id) for run_id in run_ids]
    try:
        await _groups_add(layer, groups, channel)
        pending = await read_released(_runs_still_active, run_ids)
        while pending:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            try:
                message = await asyncio.wait_for(layer.receive(channel), remaining)
            except TimeoutError:
                return
            if _is_terminal_message(message):
                pending.discard(str(message.get("run_id")))
    finally:
        if unsubscribe_later:
            # A running loop finishes the task; the set holds it until then.
            task = loop.create_task(_groups_discard(layer, groups, channel))
            _unsubscribing.add(task)
            task.add_done_callback(_unsubscribing.discard)
        else:
            await _groups_discard(layer, groups, channel)


@dataclass
class SweepResult:
    lost: list[str] = field(default_factory=list)
    redispatched: list[str] = field(default_factory=list)


def runs_sweep(*, now: Any = None) -> SweepResult:
    """Fail runs whose lease expired (`worker_lost`, retryable) and re-send runs queued for too long.

    Each lost run is failed by its own conditional update, so a worker that renews at the same moment
    either keeps the run or loses it — never both. Runs still waiting behind an earlier active run of
    their conversation (the `queue` policy) are not re-sent: that run's end sends them.
    """
    now = now or timezone.now()
    result = SweepResult()
    expired = list(
        Run.objects.filter(status=Run.Status.RUNNING, lease_expires_at__lt=now)
        .order_by("lease_expires_at")
        .values_list("pk", flat=True)[: settings.LANGBOT_SWEEP_BATCH]
    )
    for pk in expired:
        with transaction.atomic():
            failed = Run.objects.filter(pk=pk, status=Run.Status.RUNNING, lease_expires_at__lt=now).update(
                status=Run.Status.FAILED,
                status_reason="worker_lost",
                error={
                    "code": "worker_lost",
                    "message": "the worker running this run stopped renewing its lease",
                    "retryable": True,
                    "details": {},
                },
                finished_at=now,
                lease_expires_at=None,
            )
            if not failed:
                continue
            run = Run.objects.get(pk=pk)
            run_status_publish_on_commit(run=run)
            runs_ended(runs=[run])
            run_dispatch_next_on_commit(run=run)
            result.lost.append(str(run.run_id))
    if result.lost:
        logger.warning("swept %d run(s) whose worker was lost: %s", len(result.lost), ", ".join(result.lost))

    stale_before = now - timedelta(seconds=settings.LANGBOT_QUEUED_STALE_SECONDS)
    earlier_active = Run.objects.filter(
        workspace_id=OuterRef("workspace_id"),
        conversation_id=OuterRef("conversation_id"),
        binding_id=OuterRef("binding_id"),
        status__in=Run.ACTIVE_STATUSES,
        id__lt=OuterRef("id"),
    ).exclude(conversation_id="")
    stale = (
        Run.objects.filter(status=Run.Status.QUEUED, created_at__lt=stale_before)
        .exclude(Exists(earlier_active))
        .order_by("id")
        .values_list("run_id", flat=True)[: settings.LANGBOT_SWEEP_BATCH]
    )
    # Sent together: the dispatcher puts up to its batch size of them in each message.
    result.redispatched = [str(run_id) for run_id in stale]
    runs_dispatch(run_ids=result.redispatched)
    if result.redispatched:
        logger.info("re-sent %d run(s) left queued", len(result.redispatched))
    return result
