"""Platform action requests (PROTOCOL_V1 §6.6, §7.8): record every request a runner makes — through
`api.platform.request_action` or an `action.requested` result — and execute it only when allowed.

The decision, from the run's frozen snapshot (`resources.platform_capabilities`): an action the
manifest does not ask for or the binding's policy does not list is `refused`; an allowed action waits
for an operator (`pending_approval`) when the binding sets `require_action_approval` (the default),
and is executed at once otherwise. An operator approves (and thereby executes) or rejects a pending
request in admin. Execution goes through `runners.hostapi.delivery`.
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction
from django.utils import timezone

from langbot_sdk.authorization import platform_action_decision
from runners.hostapi.delivery import DeliveryError, platform_action_deliver, run_surface
from runners.models import PlatformActionRequest, Run

logger = logging.getLogger(__name__)


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
    decision = platform_action_decision(capabilities=capabilities, action=action)
    if not decision.allowed:
        status = PlatformActionRequest.Status.REFUSED
    elif decision.needs_approval:
        status = PlatformActionRequest.Status.PENDING
    else:
        status = PlatformActionRequest.Status.EXECUTED  # provisional, settled by `_execute`
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
    )
    if status == PlatformActionRequest.Status.EXECUTED:
        request = _execute(request)
    return request


def platform_action_approve(*, request: PlatformActionRequest, operator: str) -> PlatformActionRequest:
    """An operator's approval: a pending request executes now (once — a second approval does nothing)."""
    with transaction.atomic():
        claimed = PlatformActionRequest.objects.filter(
            pk=request.pk, status=PlatformActionRequest.Status.PENDING
        ).update(decided_by=operator[:150], decided_at=timezone.now())
        request.refresh_from_db()
        if not claimed:
            return request
        return _execute(request)


def platform_action_reject(*, request: PlatformActionRequest, operator: str) -> PlatformActionRequest:
    PlatformActionRequest.objects.filter(pk=request.pk, status=PlatformActionRequest.Status.PENDING).update(
        status=PlatformActionRequest.Status.REJECTED, decided_by=operator[:150], decided_at=timezone.now()
    )
    request.refresh_from_db()
    return request


def platform_actions_from_results(*, run: Run, events: list[tuple[str, dict[str, Any]]]) -> None:
    """Record (and, when allowed, execute) the `action.requested` results of a batch. Called by the
    ledger inside its transaction; a failing delivery is recorded, never fatal to the run."""
    requested = [data for type_, data in events if type_ == "action.requested"]
    if not requested:
        return
    capabilities = ((run.authorization or {}).get("resources") or {}).get("platform_capabilities") or {}
    for data in requested:
        target, payload = data.get("target"), data.get("payload")
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
