"""Platform action requests (docs/platform-actions.md): record every request a runner makes — through
`api.platform.request_action` or an `action.requested` result — execute it only when allowed, and settle
the ones that wait for an operator.

The decision, from the run's frozen snapshot (`resources.platform_capabilities`): an action the
manifest does not ask for or the binding's policy does not list is `refused`; an allowed action waits
for an operator (`pending_approval`) when the binding sets `require_action_approval` (the default),
and is executed at once otherwise. Execution goes through `runners.actions.delivery`.

A pending request is bounded by its run: it expires (`expired`, error `expired`) when nobody decided
by `expires_at` — `LANGBOT_ACTION_APPROVAL_SECONDS` after it was made, and never after the run's deadline —
and an approval that comes once the run ended is refused and recorded (`expired`, error `run_ended`),
unless the runner said the action may outlive its run (`payload.may_outlive_run: true`, which the
operator sees before approving). Expiry is applied lazily wherever a request is read or decided, and in
bulk by the runs sweep (`platform_actions_expire`). A runner reads the outcome with the `action.get`
platform action (`platform_action_lookup`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from langbot_sdk.authorization import platform_action_decision, platform_action_outlive_split
from langbot_sdk.protocol import PlatformActionStatus
from runners.actions.delivery import DeliveryError, platform_action_deliver, run_surface
from runners.actions.observers import actions_requested
from runners.models import PlatformActionRequest, Run
from runners.takeover.services import REASON_MAX, handoff_request

logger = logging.getLogger(__name__)

# The kind of `action.requested` by which a runner asks for a human (README "Human takeover"): the host's own
# action, never a platform's, so it needs no grant and is not recorded as a platform action request.
HANDOFF_ACTION = "handoff"

PENDING = PlatformActionRequest.Status.PENDING
EXPIRED_ERROR = {"code": "expired", "message": "nobody approved or rejected the request in time"}
RUN_ENDED_ERROR = {
    "code": "run_ended",
    "message": "its run ended before the approval, and the request did not say it may outlive the run",
}


@dataclass(frozen=True)
class DecisionOutcome:
    """What an operator's approve/reject did: `decided` is false when the request was no longer pending
    (already decided, expired, or — for an approval — its run had ended; then `request.error` says why)."""

    request: PlatformActionRequest
    decided: bool


def _approval_seconds() -> float:
    return float(getattr(settings, "LANGBOT_ACTION_APPROVAL_SECONDS", 600))


def _expires_at(*, run: Run, may_outlive_run: bool, now: datetime) -> datetime:
    expires = now + timedelta(seconds=_approval_seconds())
    if not may_outlive_run and run.deadline_at is not None:
        expires = min(expires, run.deadline_at)
    return expires


def _execute(request: PlatformActionRequest) -> PlatformActionRequest:
    run = Run.objects.select_related("bot", "event").get(pk=request.run_id)
    now = timezone.now()
    try:
        with transaction.atomic():
            result = platform_action_deliver(
                run=run, action=request.action, target=request.target, payload=request.payload
            )
    except DeliveryError as exc:
        request.status = PlatformActionRequest.Status.FAILED
        request.error = {"code": exc.code, "message": str(exc)}
    else:
        request.status = PlatformActionRequest.Status.EXECUTED
        request.result = result
        request.executed_at = now
    request.save(update_fields=["status", "error", "result", "executed_at"])
    return request


def platform_action_submit(
    *, run: Run, capabilities: dict[str, Any], action: str, target: dict[str, Any], payload: dict[str, Any], origin: str
) -> PlatformActionRequest:
    """Record a request and, when nothing stands in its way, execute it. Returns the recorded request,
    whose status says what happened."""
    payload, may_outlive_run = platform_action_outlive_split(payload)
    decision = platform_action_decision(capabilities=capabilities, action=action)
    if not decision.allowed:
        status = PlatformActionRequest.Status.REFUSED
    elif decision.needs_approval:
        status = PENDING
    else:
        status = PlatformActionRequest.Status.EXECUTED  # provisional, settled by `_execute`
    now = timezone.now()
    # A pending request's observers (the webhook outbox) write in its transaction: both commit or neither.
    with transaction.atomic():
        request = PlatformActionRequest.objects.create(
            workspace_id=run.workspace_id,
            run=run,
            runner_id=run.runner_id,
            binding_key=run.binding_key,
            surface=run_surface(run),
            action=action[:100],
            target=target,
            payload=payload,
            origin=origin,
            status=status,
            may_outlive_run=may_outlive_run,
            expires_at=_expires_at(run=run, may_outlive_run=may_outlive_run, now=now) if status == PENDING else None,
        )
        if status == PENDING:
            actions_requested(requests=[request])
    if status == PlatformActionRequest.Status.EXECUTED:
        request = _execute(request)
    return request


def platform_actions_expire(*, queryset: QuerySet[PlatformActionRequest] | None = None) -> int:
    """Expire the pending requests (of `queryset`, else all) whose time ran out, or whose run ended while
    they may not outlive it. Returns how many expired."""
    now = timezone.now()
    pending = (queryset if queryset is not None else PlatformActionRequest.objects.all()).filter(status=PENDING)
    expired = pending.filter(expires_at__lte=now).update(
        status=PlatformActionRequest.Status.EXPIRED, error=EXPIRED_ERROR, decided_at=now
    )
    # Ended runs are few among the pending requests' runs; the join stays on the pending rows.
    run_ended = pending.filter(may_outlive_run=False, run__status__in=Run.TERMINAL_STATUSES).update(
        status=PlatformActionRequest.Status.EXPIRED, error=RUN_ENDED_ERROR, decided_at=now
    )
    if expired or run_ended:
        logger.info("platform actions: %d expired, %d expired with their run", expired, run_ended)
    return expired + run_ended


def _refusal(row: PlatformActionRequest, now: datetime) -> dict[str, str] | None:
    if row.expires_at is not None and row.expires_at <= now:
        return EXPIRED_ERROR
    if not row.may_outlive_run and row.run.status in Run.TERMINAL_STATUSES:
        return RUN_ENDED_ERROR
    return None


def platform_action_approve(*, request: PlatformActionRequest, operator: str) -> DecisionOutcome:
    """An operator's approval: a pending request executes now (once — a second approval does nothing).
    One that expired, or whose run ended while it may not outlive it, is not executed: it is recorded as
    `expired` with the operator and the reason (`run_ended` or `expired`) in `error`."""
    now = timezone.now()
    with transaction.atomic():
        row = (
            PlatformActionRequest.objects.select_for_update(of=("self",))
            .select_related("run")
            .filter(pk=request.pk, status=PENDING)
            .first()
        )
        if row is None:
            # A late approval of a request that already expired is recorded too: who tried.
            PlatformActionRequest.objects.filter(
                pk=request.pk, status=PlatformActionRequest.Status.EXPIRED, decided_by=""
            ).update(decided_by=operator[:150])
            request.refresh_from_db()
            return DecisionOutcome(request=request, decided=False)
        row.decided_by, row.decided_at = operator[:150], now
        refusal = _refusal(row, now)
        if refusal is not None:
            row.status, row.error = PlatformActionRequest.Status.EXPIRED, refusal
            row.save(update_fields=["status", "error", "decided_by", "decided_at"])
            logger.info("platform action %s: approval by %s refused (%s)", row.pk, operator, refusal["code"])
            return DecisionOutcome(request=row, decided=False)
        row.save(update_fields=["decided_by", "decided_at"])
        return DecisionOutcome(request=_execute(row), decided=True)


def platform_action_reject(*, request: PlatformActionRequest, operator: str) -> DecisionOutcome:
    """An operator's rejection of a pending request (one that already expired stays expired)."""
    platform_actions_expire(queryset=PlatformActionRequest.objects.filter(pk=request.pk))
    rejected = PlatformActionRequest.objects.filter(pk=request.pk, status=PENDING).update(
        status=PlatformActionRequest.Status.REJECTED, decided_by=operator[:150], decided_at=timezone.now()
    )
    request.refresh_from_db()
    return DecisionOutcome(request=request, decided=bool(rejected))


def platform_action_lookup(*, run: Run, request_id: int) -> PlatformActionStatus | None:
    """What became of a request, as a runner may see it: one of the same runner and binding in the run's
    own conversation (None otherwise, as for an unknown id)."""
    scoped = PlatformActionRequest.objects.filter(
        pk=request_id,
        workspace_id=run.workspace_id,
        runner_id=run.runner_id,
        binding_key=run.binding_key,
        run__conversation_id=run.conversation_id,
    )
    platform_actions_expire(queryset=scoped)
    found = scoped.first()
    return platform_action_status(found) if found is not None else None


def platform_action_status(request: PlatformActionRequest) -> PlatformActionStatus:
    return PlatformActionStatus(
        request_id=request.pk,
        action=request.action,
        status=request.status,  # the model's choices are the protocol's names
        result=request.result or {},
        error=request.error,
        may_outlive_run=request.may_outlive_run,
        expires_at=request.expires_at,
        decided_at=request.decided_at,
        executed_at=request.executed_at,
    )


# --- reads (REST) ----------------------------------------------------------------------------------


def platform_action_get(*, workspace_id: int, request_id: int) -> PlatformActionRequest | None:
    """One request of the workspace, expired first if its time ran out."""
    scoped = PlatformActionRequest.objects.filter(pk=request_id, workspace_id=workspace_id)
    platform_actions_expire(queryset=scoped)
    return scoped.select_related("run").first()


def platform_action_page(
    *, workspace_id: int, status: str | None, run_id: str | None, before: int | None, limit: int
) -> tuple[list[PlatformActionRequest], int | None]:
    """The workspace's requests, newest first (`before`: a request id cursor); the pending ones whose time
    ran out are expired first, so a `pending_approval` list shows only what can still be approved."""
    scoped = PlatformActionRequest.objects.filter(workspace_id=workspace_id)
    platform_actions_expire(queryset=scoped)
    if status is not None:
        scoped = scoped.filter(status=status)
    if run_id is not None:
        scoped = scoped.filter(run__run_id=run_id)
    if before is not None:
        scoped = scoped.filter(pk__lt=before)
    rows = list(scoped.select_related("run").order_by("-pk")[: limit + 1])
    return rows[:limit], (rows[limit - 1].pk if len(rows) > limit else None)


def platform_actions_from_results(*, run: Run, events: list[tuple[str, dict[str, Any]]]) -> None:
    """Record (and, when allowed, execute) the `action.requested` results of a batch. Called by the
    ledger inside its transaction; a failing delivery is recorded, never fatal to the run. A `handoff`
    puts the run's conversation in the operators' inbox instead (`runners.takeover`)."""
    requested = [data for type_, data in events if type_ == "action.requested"]
    if not requested:
        return
    capabilities = ((run.authorization or {}).get("resources") or {}).get("platform_capabilities") or {}
    for data in requested:
        target, payload = data.get("target"), data.get("payload")
        if data.get("action") == HANDOFF_ACTION:
            reason = payload.get("reason") if isinstance(payload, dict) else None
            try:
                with transaction.atomic():
                    handoff_request(run=run, reason=str(reason)[:REASON_MAX] if reason else "")
            except Exception:
                logger.exception("run %s: could not record a handoff request", run.run_id)
            continue
        try:
            with transaction.atomic():
                platform_action_submit(
                    run=run,
                    capabilities=capabilities,
                    action=str(data.get("action") or ""),
                    target=target if isinstance(target, dict) else {},
                    payload=payload if isinstance(payload, dict) else {},
                    origin=PlatformActionRequest.Origin.RESULT,
                )
        except Exception:
            logger.exception("run %s: could not record an action.requested result", run.run_id)
