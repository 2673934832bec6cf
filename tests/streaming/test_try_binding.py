"""The binding admin's "try it" box: its socket ticket goes only to staff who may change the binding, and the
socket it opens talks only to that binding, in conversations of its own."""

from __future__ import annotations

from typing import Any

import pytest
from channels.db import database_sync_to_async
from django.test import Client

from bindings.models import AgentBinding
from bindings.services import workspace_member_add
from tests.factories import AgentBindingFactory, UserFactory, WorkspaceFactory
from tests.security.conftest import grant_permissions
from tests.streaming.conftest import ORIGIN, next_json, open_socket

pytestmark = pytest.mark.django_db(transaction=True)


def _staff(workspace: Any, role: str = "developer") -> Any:
    user = UserFactory.create(is_staff=True)
    grant_permissions(user, ["bindings.AgentBinding"])
    workspace_member_add(workspace=workspace, user=user, role=role)
    return user


def _ticket_response(user: Any, binding: AgentBinding) -> Any:
    client = Client()
    client.force_login(user)
    return client.post(f"/chat/try/{binding.pk}/ticket")


def _binding() -> AgentBinding:
    return AgentBindingFactory.create(workspace=WorkspaceFactory.create(), binding_id="support")


def test_staff_who_may_change_the_binding_get_a_ticket_for_it():
    binding = _binding()

    response = _ticket_response(_staff(binding.workspace), binding)

    assert response.status_code == 201
    body = response.json()
    assert body["binding_id"] == "support"
    assert body["url"] == f"/ws/v1/chat/?ticket={body['ticket']}"


def test_a_member_who_is_not_staff_gets_no_ticket():
    binding = _binding()
    user = UserFactory.create(is_staff=False)
    assert binding.workspace is not None
    workspace_member_add(workspace=binding.workspace, user=user, role="owner")

    response = _ticket_response(user, binding)

    assert response.status_code == 403
    assert response.json()["error"]["code"] == "forbidden"


@pytest.mark.parametrize("whose", ["another workspace's staff", "a viewer"])
def test_staff_who_may_not_change_the_binding_are_told_it_does_not_exist(whose):
    binding = _binding()
    user = _staff(WorkspaceFactory.create()) if whose.startswith("another") else _staff(binding.workspace, "viewer")

    response = _ticket_response(user, binding)

    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_a_global_binding_is_not_tried_from_its_page():
    binding = AgentBindingFactory.create(workspace=None, scope_type="global", binding_id="everyone")
    root = UserFactory.create(is_staff=True, is_superuser=True)

    response = _ticket_response(root, binding)

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "binding.global"


def _ticket_for(binding: AgentBinding) -> tuple[str, Any]:
    user = _staff(binding.workspace)
    response = _ticket_response(user, binding)
    assert response.status_code == 201
    return response.json()["ticket"], user


async def test_the_socket_sends_to_its_binding_in_a_conversation_of_its_own():
    binding = await database_sync_to_async(_binding)()
    ticket, _ = await database_sync_to_async(_ticket_for)(binding)
    comm, _, _ = await open_socket(ORIGIN, query=f"ticket={ticket}")

    await comm.send_json_to({"type": "message", "binding_id": "support", "text": "hello"})
    messages = [await next_json(comm), await next_json(comm)]

    status = next(m for m in messages if m["type"] == "run.status")
    assert status["binding_id"] == "support"
    assert status["conversation_id"].startswith("try:support:")
    await comm.disconnect()


@pytest.mark.parametrize(
    "request_",
    [
        {"type": "message", "binding_id": "other", "text": "hello"},
        {"type": "message", "text": "to whoever answers"},
        {"type": "message", "binding_id": "support", "conversation_id": "webui:someone", "text": "hi"},
        {"type": "subscribe", "conversation_id": "webui:someone"},
        {"type": "cancel", "run_id": "r-1"},
    ],
    ids=["another binding", "no binding", "another conversation", "subscribe elsewhere", "cancel"],
)
async def test_the_socket_may_do_nothing_else(request_):
    binding = await database_sync_to_async(_binding)()
    await database_sync_to_async(AgentBindingFactory.create)(workspace=binding.workspace, binding_id="other")
    ticket, _ = await database_sync_to_async(_ticket_for)(binding)
    comm, _, _ = await open_socket(ORIGIN, query=f"ticket={ticket}")

    await comm.send_json_to(request_)

    reply = await next_json(comm)
    assert reply["type"] == "error"
    assert reply["code"] == "forbidden"
    await comm.disconnect()


async def test_a_ticket_of_someone_no_longer_staff_is_refused():
    binding = await database_sync_to_async(_binding)()
    ticket, user = await database_sync_to_async(_ticket_for)(binding)
    user.is_staff = False
    await database_sync_to_async(user.save)()

    comm, _, _ = await open_socket(ORIGIN, query=f"ticket={ticket}")

    assert await comm.receive_output(timeout=5) == {"type": "websocket.close", "code": 4403}


def test_the_binding_page_shows_the_try_it_box_outside_the_form():
    binding = _binding()
    client = Client()
    client.force_login(UserFactory.create(is_staff=True, is_superuser=True))

    page = client.get(f"/admin/bindings/agentbinding/{binding.pk}/change/").content.decode()

    box = page.index('id="try-binding"')
    assert f'data-ticket-url="/chat/try/{binding.pk}/ticket"' in page
    assert page.rindex("</form>") < box
