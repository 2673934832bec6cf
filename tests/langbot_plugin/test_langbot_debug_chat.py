"""The LangBot-SDK echo runner (run by LangBot's own `lbp rt`, bridged by the host's worker) chatted with in
the web debug chat, as a signed-in member does it: through `/chat/login/`, the page's configuration and its
WebSocket `/ws/v1/chat/` on a real daphne. The reply streams in as deltas and completes; a slower turn is
stopped with the socket's `cancel` and ends cancelled by the LangBot runtime.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import httpx
import pytest
import websockets
from websockets.asyncio.client import ClientConnection
from websockets.typing import Origin

from tests.processes import wait_terminal

pytestmark = [pytest.mark.integration, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def _sign_in(base_url: str, username: str) -> tuple[dict[str, Any], str]:
    """Sign in on the debug chat's login page and open the chat page: its configuration and the session."""
    with httpx.Client(base_url=base_url, timeout=30) as browser:
        assert browser.get("/chat/login/").status_code == 200
        signed_in = browser.post(
            "/chat/login/",
            data={"username": username, "password": "pw", "next": "/chat/",
                  "csrfmiddlewaretoken": browser.cookies["csrftoken"]},
        )  # fmt: skip
        assert (signed_in.status_code, signed_in.headers.get("location")) == (302, "/chat/"), signed_in.text[:500]
        page = browser.get("/chat/")
        assert page.status_code == 200, page.text[:500]
        found = re.search(r'<script id="chat-config" type="application/json">(.*?)</script>', page.text, re.S)
        assert found is not None, "the chat page carries no configuration"
        return json.loads(found.group(1)), browser.cookies["sessionid"]


async def _next_run_message(socket: ClientConnection) -> dict[str, Any]:
    """The next message about a run (`run.status` or `run.event`); the server's keepalive pings are skipped."""
    while True:
        message = json.loads(await socket.recv())
        assert message["type"] != "error", message
        if message["type"] in ("run.status", "run.event"):
            return message


async def _chat(url: str, origin: str, session: str, binding_id: str) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    headers = {"Cookie": f"sessionid={session}"}
    async with websockets.connect(url, origin=Origin(origin), additional_headers=headers, open_timeout=30) as socket:
        async with asyncio.timeout(60):
            await socket.send(json.dumps({"type": "message", "binding_id": binding_id, "text": "hello debug chat"}))
            queued = await _next_run_message(socket)
            assert queued["type"] == "run.status", queued
            conversation_id, seen["first"] = queued["conversation_id"], queued["run_id"]
            deltas: list[str] = []
            # Until the run has ended and, when it completed, its completed message has arrived too.
            while seen.get("first_status", "running") == "running" or (
                seen["first_status"] == "completed" and "completed" not in seen
            ):
                message = await _next_run_message(socket)
                assert message["run_id"] == seen["first"], message
                if message["type"] == "run.status":
                    if message["status"] in ("completed", "failed", "cancelled"):
                        seen["first_status"] = message["status"]
                    continue
                event = message["event"]
                assert event["type"] != "run.failed", event
                if event["type"] == "message.delta":
                    deltas.append(event["data"]["chunk"]["content"])
                elif event["type"] == "message.completed":
                    seen["completed"] = event["data"]["message"]["content"]
            seen["deltas"] = deltas

            # A slower turn in the same conversation: the runner streams one chunk, then waits.
            await socket.send(json.dumps({"type": "message", "conversation_id": conversation_id, "text": "sleep"}))
            queued = await _next_run_message(socket)
            seen["second"] = queued["run_id"]
            while True:
                message = await _next_run_message(socket)
                if message["type"] == "run.event" and message["event"]["type"] == "message.delta":
                    seen["sleeping"] = message["event"]["data"]["chunk"]["content"]
                    break
                assert message.get("status") not in ("completed", "failed", "cancelled"), message
            await socket.send(json.dumps({"type": "cancel", "run_id": seen["second"]}))
            while True:
                message = await _next_run_message(socket)
                if message["type"] == "run.status" and message["status"] in ("completed", "failed", "cancelled"):
                    assert message["run_id"] == seen["second"], message
                    seen["second_status"] = message["status"]
                    break
    return seen


def test_the_debug_chat_streams_a_langbot_runners_reply_and_cancels_its_slower_turn(langbot_binding, start_langbot_web):
    from django.contrib.auth.hashers import PBKDF2PasswordHasher

    from bindings.models import WorkspaceMembership
    from runners.models import Run
    from runtimes.langbot.bridge import CANCELLED_MESSAGE
    from tests.factories import UserFactory

    binding, _worker = langbot_binding
    # Hashed as the web process checks it (the test settings' fast hasher is not one it accepts).
    hasher = PBKDF2PasswordHasher()
    member = UserFactory.create(password=hasher.encode("pw", hasher.salt()))
    WorkspaceMembership.objects.create(workspace=binding.workspace, user=member, role=WorkspaceMembership.Role.ADMIN)
    web = start_langbot_web()
    config, session = _sign_in(web.url, member.username)
    assert config["workspace"] == binding.workspace.slug
    assert binding.binding_id in {target["binding_id"] for target in config["bindings"]}, config["bindings"]
    url = web.url.replace("http://", "ws://") + config["ws_path"] + "?workspace=" + config["workspace"]

    seen = asyncio.run(_chat(url, web.url, session, binding.binding_id))

    assert seen["first_status"] == "completed", wait_terminal(Run.objects.get(run_id=seen["first"])).error
    assert seen["completed"] == "hi: hello debug chat (turn 1, history 1)"
    assert len(seen["deltas"]) > 1  # streamed word by word, not in one piece
    assert "".join(seen["deltas"]).strip() == seen["completed"]

    assert seen["sleeping"] == "sleeping"
    assert seen["second_status"] == "cancelled"
    cancelled = Run.objects.get(run_id=seen["second"])
    # Ended by the bridge on the cancel it passed to the LangBot runtime, not by the host's cancel grace.
    assert cancelled.error is not None
    assert cancelled.error["message"] == CANCELLED_MESSAGE, cancelled.error
