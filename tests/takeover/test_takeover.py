"""Human takeover (README "Human takeover"): a held conversation's messages start no run and reach the
operator; the operator's replies are recorded as the bot's side; release lets the bindings answer again and
the next run is told what happened; a runner's handoff fills the inbox and the webhook; another workspace
cannot touch the conversation."""

from __future__ import annotations

import hashlib
import json
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from platforms.webhooks.models import WebhookDelivery, WebhookEndpoint
from runners.actions.platform_actions import platform_actions_from_results
from runners.models import Run
from runners.orchestrator.context import context_build
from runners.takeover.models import ConversationHold
from tests.factories import AgentBindingFactory, RunnerDescriptorFactory, UserFactory, WorkspaceFactory
from transcripts.models import EventLog, TranscriptItem

pytestmark = pytest.mark.django_db
CONVERSATION = "support/42"


def _say(client: Any, text: str) -> dict[str, Any]:
    answer = client.post(
        "/api/v1/events",
        {"event_type": "message.received", "conversation_id": CONVERSATION, "input": {"text": text}},
        format="json",
    )
    assert answer.status_code in (200, 202), answer.content
    body: dict[str, Any] = answer.json()
    return body


def _url(action: str, conversation: str = CONVERSATION) -> str:
    return f"/api/v1/conversations/{conversation}/{action}"


@pytest.fixture
def binding(workspace):
    manifest = {"id": f"plugin:tester/takeover-{workspace.pk}/default", "name": "default", "label": {"en_US": "t"}}
    descriptor = RunnerDescriptorFactory.create(
        manifest=manifest,
        plugin_name=f"takeover-{workspace.pk}",
        manifest_sha256=hashlib.sha256(json.dumps(manifest).encode()).hexdigest(),
    )
    return AgentBindingFactory.create(workspace=workspace, runner_id=descriptor.runner_id)


def test_a_held_conversation_starts_no_run_until_released_and_the_next_run_is_told(api_client, binding):
    first = _say(api_client, "hello bot")
    assert len(first["runs"]) == 1

    taken = api_client.post(_url("takeover"), {"reason": "angry customer"}, format="json")
    assert taken.status_code == 200, taken.content
    assert taken.json()["status"] == "held"

    waiting = _say(api_client, "I want a person")
    assert (waiting["status"], waiting["runs"]) == ("held", [])
    assert Run.objects.count() == 1

    reply = api_client.post(_url("messages"), {"text": "Hi, I am Ann from support."}, format="json")
    assert reply.status_code == 201, reply.content
    item = TranscriptItem.objects.get(pk=int(reply.json()["message_id"]))
    assert (item.role, item.content) == ("assistant", "Hi, I am Ann from support.")
    assert item.actor is not None
    assert item.actor["actor_type"] == "operator"

    released = api_client.post(_url("release"))
    assert released.status_code == 200
    assert released.json()["status"] == "released"

    after = _say(api_client, "thanks, bot again")
    assert len(after["runs"]) == 1
    run = Run.objects.select_related("event", "binding", "workspace", "bot").get(run_id=after["runs"][0]["run_id"])
    built = context_build(
        run=run,
        event=run.event,
        binding=binding,
        descriptor=_descriptor(binding),
        deadline_at=timezone.now() + timedelta(seconds=60),
    )
    fact = built.context.metadata["human_takeover"]
    assert fact["reason"] == "angry customer"
    assert [(m["role"], m["text"]) for m in fact["messages"]] == [
        ("user", "I want a person"),
        ("operator", "Hi, I am Ann from support."),
    ]

    # Told once: the run after that one hears nothing of it.
    later = _say(api_client, "one more")
    later_run = Run.objects.select_related("event").get(run_id=later["runs"][0]["run_id"])
    again = context_build(
        run=later_run, event=later_run.event, binding=binding, descriptor=_descriptor(binding),
        deadline_at=timezone.now() + timedelta(seconds=60),
    )  # fmt: skip
    assert "human_takeover" not in again.context.metadata


def _descriptor(binding):
    from bindings.models import RunnerDescriptor

    return RunnerDescriptor.objects.get(runner_id=binding.runner_id)


def test_release_or_reply_without_a_hold_is_refused_and_an_unknown_conversation_is_not_found(api_client, binding):
    _say(api_client, "hello")
    assert api_client.post(_url("release")).json()["error"]["code"] == "takeover.not_held"
    assert api_client.post(_url("messages"), {"text": "hi"}, format="json").status_code == 409
    assert api_client.post(_url("takeover", "never-said-anything")).status_code == 404
    assert api_client.post(_url("messages"), {"text": "  "}, format="json").status_code == 400


def test_another_workspace_cannot_take_over_release_or_reply(api_client, api_client_for, binding):
    _say(api_client, "hello")
    intruder = api_client_for(WorkspaceFactory.create())
    assert intruder.post(_url("takeover")).status_code == 404
    assert intruder.post(_url("release")).status_code == 404
    assert intruder.post(_url("messages"), {"text": "boo"}, format="json").status_code == 404
    assert not ConversationHold.objects.exists()

    api_client.post(_url("takeover"))
    assert intruder.post(_url("release")).status_code == 404
    assert ConversationHold.objects.get().status == "held"


def _handoff(run: Run, reason: str = "needs a refund") -> None:
    platform_actions_from_results(
        run=run, events=[("action.requested", {"action": "handoff", "target": {}, "payload": {"reason": reason}})]
    )


def test_a_runners_handoff_fills_the_inbox_oldest_first_and_sends_the_webhook(workspace, api_client, binding):
    endpoint = WebhookEndpoint.objects.create(
        workspace=workspace, url="https://receiver.example/hook", event_types=["handoff.requested"], secret="whsec_x"
    )
    from platforms.webhooks.outbox import subscribed_workspaces_forget

    subscribed_workspaces_forget()
    _say(api_client, "first customer")
    first_run = Run.objects.get()
    _handoff(first_run)
    _handoff(first_run)  # asked twice: one wait, one message

    other = api_client.post(
        "/api/v1/events",
        {"event_type": "message.received", "conversation_id": "other", "input": {"text": "second"}},
        format="json",
    ).json()
    _handoff(Run.objects.get(run_id=other["runs"][0]["run_id"]), reason="second")

    inbox = api_client.get("/api/v1/handoffs").json()["items"]
    assert [(h["conversation_id"], h["reason"]) for h in inbox] == [
        (CONVERSATION, "needs a refund"),
        ("other", "second"),
    ]

    (delivery, second) = WebhookDelivery.objects.filter(endpoint=endpoint).order_by("id")
    assert delivery.event_type == "handoff.requested"
    assert delivery.payload["data"]["conversation_id"] == CONVERSATION
    assert delivery.payload["data"]["takeover"]["path"] == f"/api/v1/conversations/{CONVERSATION}/takeover"
    assert second.payload["data"]["reason"] == "second"

    # Taking it over takes it out of the inbox.
    api_client.post(_url("takeover"))
    assert [h["conversation_id"] for h in api_client.get("/api/v1/handoffs").json()["items"]] == ["other"]


def test_the_admin_inbox_lists_waiting_conversations_with_a_take_over_button(workspace, api_client, binding):
    _say(api_client, "help")
    _handoff(Run.objects.get())
    admin_user = UserFactory.create(is_staff=True, is_superuser=True)
    browser = Client()
    browser.force_login(admin_user)

    page = browser.get(reverse("admin:takeover_waitingconversation_changelist"))
    body = page.content.decode()
    assert page.status_code == 200
    assert CONVERSATION in body
    assert "Take over" in body
    assert "1 conversation waits for a human" in body

    take = reverse(
        "admin:takeover_conversation_takeover", kwargs={"workspace_id": workspace.pk, "conversation_id": CONVERSATION}
    )
    assert browser.post(take).status_code == 302
    hold = ConversationHold.objects.get()
    assert (hold.status, hold.held_by) == ("held", admin_user.get_username())
    assert _say(api_client, "still there?")["runs"] == []
    assert EventLog.objects.filter(status=EventLog.Status.HELD).count() == 1

    release = reverse(
        "admin:takeover_conversation_release", kwargs={"workspace_id": workspace.pk, "conversation_id": CONVERSATION}
    )
    assert browser.post(release).status_code == 302
    assert len(_say(api_client, "back")["runs"]) == 1


def test_staff_of_another_workspace_cannot_take_over_from_the_admin(workspace, api_client, binding):
    from bindings.services import workspace_member_add
    from tests.security.conftest import grant_permissions

    _say(api_client, "help")
    stranger = UserFactory.create(is_staff=True)
    workspace_member_add(workspace=WorkspaceFactory.create(), user=stranger)
    grant_permissions(stranger, ["takeover.ConversationHold"])
    browser = Client()
    browser.force_login(stranger)
    take = reverse(
        "admin:takeover_conversation_takeover", kwargs={"workspace_id": workspace.pk, "conversation_id": CONVERSATION}
    )
    assert browser.post(take).status_code == 403
    assert not ConversationHold.objects.exists()


def test_the_admin_conversation_page_offers_take_over_then_release(workspace, api_client, binding):
    _say(api_client, "hello")
    admin_user = UserFactory.create(is_staff=True, is_superuser=True)
    browser = Client()
    browser.force_login(admin_user)
    page_url = reverse("admin-conversation", kwargs={"workspace_id": workspace.pk, "conversation_id": CONVERSATION})
    take = reverse(
        "admin:takeover_conversation_takeover", kwargs={"workspace_id": workspace.pk, "conversation_id": CONVERSATION}
    )

    page = browser.get(page_url).content.decode()
    assert take in page
    assert ">Take over</button>" in page

    assert browser.post(take, {"next": page_url})["Location"] == page_url
    held_page = browser.get(page_url).content.decode()
    assert ">Release</button>" in held_page
    assert f"held by {admin_user.get_username()}" in held_page
