"""A binding's choice for non-text input to a text-only runner (`delivery_policy.non_text_input`): `note`
(the default: the event runs, the runner reads notes) or `refuse` (the event is refused with
`input.unsupported`, in the API's answer and in the web chat, and nothing runs or is recorded)."""

from __future__ import annotations

import pytest

from runners.models import Run
from tests.factories import RunnerDescriptorFactory
from tests.gateway.support import binding_for, post_event
from tests.streaming.conftest import chat_caller
from transcripts.models import EventLog
from webchat.chat import ChatRefusedError, chat_message_submit

pytestmark = pytest.mark.django_db

IMAGE = {"type": "image_url", "image_url": "https://example.com/cat.png", "mime_type": "image/png"}


def _runner(*, multimodal: bool) -> str:
    descriptor = RunnerDescriptorFactory.create(
        manifest={
            "id": "plugin:tester/textual/default",
            "name": "default",
            "label": {"en_US": "Textual"},
            "capabilities": {"multimodal_input": multimodal},
        },
        plugin_name="textual",
    )
    return descriptor.runner_id


def _refusing(workspace, *, multimodal: bool = False, **fields):
    return binding_for(
        workspace,
        runner_id=_runner(multimodal=multimodal),
        delivery_policy={"enable_reply": True, "non_text_input": "refuse"},
        **fields,
    )


def test_a_refusing_binding_answers_input_unsupported_and_runs_nothing(api_client, workspace):
    _refusing(workspace, binding_id="text-only")

    response = post_event(api_client, {"event_id": "e-img", "input": {"text": "what is this?", "contents": [IMAGE]}})

    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "input.unsupported"
    assert "reads text only" in error["details"]["fields"]["input"]
    assert not EventLog.objects.exists()
    assert not Run.objects.exists()


def test_an_attachment_is_refused_too_but_text_still_runs(api_client, workspace):
    _refusing(workspace)
    attachment = {"base64": "aGVsbG8=", "name": "notes.txt", "mime_type": "text/plain"}

    refused = post_event(api_client, {"input": {"text": "read this", "attachments": [attachment]}})
    accepted = post_event(api_client, {"input": {"text": "just text"}})

    assert refused.json()["error"]["code"] == "input.unsupported"
    assert accepted.status_code == 202, accepted.content
    assert Run.objects.count() == 1


def test_the_default_note_and_a_multimodal_runner_take_the_image(api_client, workspace):
    binding_for(workspace, binding_id="noting", runner_id=_runner(multimodal=False))
    noted = post_event(api_client, {"input": {"text": "what is this?", "contents": [IMAGE]}})
    assert noted.status_code == 202, noted.content

    other = binding_for(workspace, binding_id="sees", priority=5, runner_id="plugin:tester/vision/default")
    RunnerDescriptorFactory.create(
        plugin_name="vision",
        manifest={
            "id": other.runner_id,
            "name": "default",
            "label": {"en_US": "Vision"},
            "capabilities": {"multimodal_input": True},
        },
    )
    other.delivery_policy = {"enable_reply": True, "non_text_input": "refuse"}
    other.save()
    seen = post_event(api_client, {"input": {"text": "and this?", "contents": [IMAGE]}})
    assert seen.status_code == 202, seen.content
    assert seen.json()["runs"][0]["binding_id"] == "sees"


def test_an_observer_that_refuses_just_does_not_run(api_client, workspace):
    binding_for(workspace, binding_id="replier", runner_id=_runner(multimodal=False))
    binding_for(
        workspace,
        binding_id="watcher",
        runner_id="plugin:tester/textual/default",
        delivery_policy={"enable_reply": False, "non_text_input": "refuse"},
    )

    response = post_event(api_client, {"input": {"text": "look", "contents": [IMAGE]}})

    assert response.status_code == 202, response.content
    assert [run["binding_id"] for run in response.json()["runs"]] == ["replier"]


def test_the_chat_user_is_told_input_unsupported(workspace):
    _refusing(workspace, binding_id="text-only")
    caller = chat_caller(workspace, "Ann")

    with pytest.raises(ChatRefusedError) as refused:
        chat_message_submit(
            caller=caller,
            conversation_id="chat-1",
            text="what is this?",
            attachments=[_attachment()],
            binding_id="text-only",
        )

    assert refused.value.code == "input.unsupported"
    assert "reads text only" in refused.value.message


def _attachment():
    from gateway.envelope import AttachmentIn

    return AttachmentIn(base64="iVBORw0KGgo=", name="cat.png", mime_type="image/png")
