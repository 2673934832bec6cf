"""`platform_request_action` (docs/platform-actions.md): record the request (`runners.actions.platform_actions`) and
answer what became of it — executed: `PlatformActionResult{accepted: true, result}`; not allowed by the
manifest and the binding policy, or waiting for an operator's approval: `unauthorized` (the details
carry `status` and the `request_id` an operator sees in admin); delivery failed: the delivery's code
(`not_found` for a target outside the run's conversation, `invalid_argument`, or `runtime_error` for
surfaces without a delivery adapter).

`action.get` (target `{"request_id"}`) is answered here, not recorded: what became of an earlier request of
the same runner and binding in the run's conversation (`PlatformActionStatus` in `result`) — how a runner
learns that a request waiting for approval was approved and executed, rejected, or expired. Another
runner's, binding's or conversation's request is `not_found`.
"""

from __future__ import annotations

from typing import Any

from hostapi.base import FamilyHandler, HandlerResult, ProxyCall
from langbot_sdk.authorization import platform_action_lookup_id, platform_action_status_answer
from langbot_sdk.protocol import (
    PLATFORM_ACTION_GET,
    Action,
    AgentAPIException,
    PlatformActionResult,
    PlatformActionStatus,
)
from runners.actions.platform_actions import platform_action_lookup, platform_action_submit
from runners.models import PlatformActionRequest, Run


def _submit(
    *, run_pk: int, capabilities: dict[str, Any], action: str, target: dict[str, Any], payload: dict[str, Any]
) -> PlatformActionRequest:
    run = Run.objects.select_related("bot", "event").get(pk=run_pk)
    return platform_action_submit(
        run=run,
        capabilities=capabilities,
        action=action,
        target=target,
        payload=payload,
        origin=PlatformActionRequest.Origin.PROXY,
    )


def _lookup(*, run_pk: int, request_id: int) -> PlatformActionStatus | None:
    return platform_action_lookup(run=Run.objects.get(pk=run_pk), request_id=request_id)


async def platform_request_action(call: ProxyCall) -> HandlerResult:
    request = call.request
    if request.action == PLATFORM_ACTION_GET:
        request_id = platform_action_lookup_id(request.target)
        found = await call.db(_lookup, run_pk=call.session.run_pk, request_id=request_id)
        if found is None:
            raise AgentAPIException.not_found(
                f"no platform action request {request_id} of this runner in this conversation", request_id=request_id
            )
        return platform_action_status_answer(found)
    recorded = await call.db(
        _submit,
        run_pk=call.session.run_pk,
        capabilities=call.session.resources.platform_capabilities,
        action=request.action,
        target=request.target,
        payload=request.payload,
    )
    details = {"request_id": recorded.pk, "status": recorded.status, "action": request.action}
    if recorded.status == PlatformActionRequest.Status.EXECUTED:
        return PlatformActionResult(accepted=True, result=recorded.result).model_dump(mode="json")
    if recorded.status == PlatformActionRequest.Status.REFUSED:
        raise AgentAPIException.unauthorized(
            f"platform action {request.action!r} is not authorized for this run", **details
        )
    if recorded.status == PlatformActionRequest.Status.PENDING:
        raise AgentAPIException.unauthorized(
            f"platform action {request.action!r} needs an operator's approval; it was recorded for review",
            **details,
        )
    error = recorded.error or {}
    raise AgentAPIException.of(
        str(error.get("code") or "runtime_error"), str(error.get("message") or "delivery failed"), **details
    )


HANDLERS: dict[Action, FamilyHandler] = {Action.PLATFORM_REQUEST_ACTION: platform_request_action}
