"""DingTalk end to end on a fake OpenAPI: robot messages posted to the HTTP callback with DingTalk's
`timestamp` + `sign` headers (a wrong, missing or hour-old signature refused and recorded, a redelivered
message handled once), replies through the message's session webhook (@ing the asker in a group) and, once
it has expired, through the robot OpenAPI with one access token bought for many replies and bought again
when DingTalk refuses it, long replies split, pictures in and files out, the credential schema checked
on save over REST and in the admin, and no body making the webhook answer 500."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model
from django.test import Client
from hypothesis import given
from hypothesis import strategies as st

from artifacts.models import Artifact
from artifacts.services import artifact_create_from_bytes
from bindings.models import Bot
from foundation.crypto import SECRET_MASK
from platforms.delivery import PlatformDeliveryPort
from platforms.models import InboundRefusal, PlatformDelivery
from platforms.tasks import platform_update_ingest
from runners.actions.delivery import surface_delivery
from runners.models import Run, RunEvent
from tests.factories import AgentBindingFactory, BotFactory, WorkspaceFactory
from tests.fakes.dingtalk_server import CLIENT_ID, CLIENT_SECRET, FakeDingTalk, sign_headers
from tests.fakes.platform_http import serving
from tests.fuzzing import fuzz_settings
from tests.platforms.test_delivery_policy import (  # noqa: F401 (autouse fixtures)
    _close_thread_connections,
    _completed,
    _deliver,
    fast_pace,
)
from transcripts.models import EventLog


@pytest.fixture
def fake_dingtalk() -> Iterator[FakeDingTalk]:
    with serving(FakeDingTalk()) as fake:
        yield fake


@pytest.fixture
def dingtalk_bot_for(fake_dingtalk: FakeDingTalk) -> Callable[..., Bot]:
    def make(workspace: Any, **credentials: Any) -> Bot:
        return BotFactory.create(
            workspace=workspace,
            platform="dingtalk",
            credentials={
                "client_id": CLIENT_ID,
                "client_secret": CLIENT_SECRET,
                "api_base_url": fake_dingtalk.origin,
                **credentials,
            },
        )

    return make


def webhook_url(bot: Bot) -> str:
    return f"/platforms/dingtalk/{bot.workspace.slug}/{bot.bot_id}/webhook"


def post_message(bot: Bot, message: dict[str, Any], *, headers: dict[str, str] | None = None) -> Any:
    """Post a robot message as DingTalk does: JSON, signed with the app's secret."""
    return Client().post(
        webhook_url(bot),
        data=json.dumps(message, ensure_ascii=False).encode(),
        content_type="application/json",
        headers=sign_headers() if headers is None else headers,
    )


@pytest.fixture
def bot(workspace: Any, dingtalk_bot_for: Callable[..., Bot]) -> Bot:
    AgentBindingFactory.create(workspace=workspace)
    return dingtalk_bot_for(workspace)


# -- inbound ----------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_one_to_one_message_becomes_one_event_however_often_it_is_posted(bot, fake_dingtalk):
    message = fake_dingtalk.robot_message("hello there", staff_id="staff-ada", nick="Ada")

    first = post_message(bot, message)
    again = post_message(bot, message)

    assert first.status_code == again.status_code == 200
    event = EventLog.objects.get()
    assert (event.input or {}).get("text") == "hello there"
    assert ((event.actor or {}).get("actor_id"), (event.actor or {}).get("actor_name")) == ("staff-ada", "Ada")
    assert event.conversation_id == f"bot:{bot.bot_id}:user:staff-ada"
    assert event.data["reply_target"]["extra"]["session_webhook"] == message["sessionWebhook"]
    # The session webhook lets its holder post into the chat: it is not in the copy runners read as raw.
    assert "sessionWebhook" not in event.data["raw"]
    assert event.data["raw"]["msgId"] == message["msgId"]
    assert Run.objects.count() == 1


@pytest.mark.django_db
def test_a_wrong_missing_or_hour_old_signature_is_refused_and_recorded(bot, fake_dingtalk):
    message = fake_dingtalk.robot_message("hello")
    two_hours_ago = int((__import__("time").time() - 7200) * 1000)

    answers = [
        post_message(bot, message, headers=sign_headers("not-the-secret")),
        post_message(bot, message, headers={}),
        post_message(bot, message, headers={**sign_headers(), "timestamp": "1"}),  # the sign was of another time
        post_message(bot, message, headers=sign_headers(timestamp_ms=two_hours_ago)),
    ]

    assert [a.status_code for a in answers] == [401, 401, 401, 401]
    assert not EventLog.objects.exists()
    counts = dict(InboundRefusal.objects.values_list("reason", "count"))
    assert counts == {"forged": 3, "replayed": 1}


@pytest.mark.django_db
def test_a_group_message_is_the_groups_conversation_and_a_picture_becomes_an_input_artifact(
    bot, fake_dingtalk, monkeypatch, django_capture_on_commit_callbacks
):
    monkeypatch.setattr(platform_update_ingest, "delay", platform_update_ingest)
    text = fake_dingtalk.robot_message("what is on the board?", group=True, conversation_id="cidTeam==")
    picture = fake_dingtalk.robot_message(msgtype="picture", content={"downloadCode": "dl-pic-1"})
    fake_dingtalk.add_file("dl-pic-1", "image/png", b"\x89PNG a board")

    with django_capture_on_commit_callbacks(execute=True):
        assert post_message(bot, text).status_code == 200
        assert post_message(bot, picture).status_code == 200

    group_event, picture_event = EventLog.objects.order_by("id")
    assert (group_event.input or {}).get("text") == "what is on the board?"
    assert group_event.conversation_id == f"bot:{bot.bot_id}:cidTeam=="
    assert group_event.data["chat_type"] == "group"
    (ref,) = (picture_event.input or {})["attachments"]
    stored = Artifact.objects.get(artifact_id=ref["artifact_id"])
    assert (stored.mime_type, stored.size) == ("image/png", len(b"\x89PNG a board"))
    assert [c.body["downloadCode"] for c in fake_dingtalk.calls_of("messageFiles.download")] == ["dl-pic-1"]


def test_ctx_delivery_says_what_dingtalk_supports():
    dingtalk = surface_delivery("dingtalk")
    assert (dingtalk.supports_edit, dingtalk.supports_reaction) == (False, False)
    assert dingtalk.max_message_size == 5000


_NOW_MS = 1_700_000_000_000
FUZZ_BASE = {
    "conversationId": "cid1==", "msgId": "m1", "senderStaffId": "s1", "conversationType": "2",
    "senderId": "u1", "chatbotUserId": "r1", "createAt": _NOW_MS, "msgtype": "richText",
    "sessionWebhook": "https://oapi.dingtalk.com/robot/sendBySession?session=x",
    "sessionWebhookExpiredTime": _NOW_MS, "robotCode": CLIENT_ID,
    "content": {"richText": [{"text": "hi"}, {"type": "picture", "downloadCode": "d"}]},
}  # fmt: skip
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8) | st.sampled_from(["\x00", "\ud800", 10**400]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)


@pytest.mark.django_db
def test_no_body_signed_or_not_makes_the_webhook_answer_500(bot, caplog, settings):
    settings.LANGBOT_INBOUND_REFUSAL_WINDOW_SECONDS = 10**9
    client = Client()

    @fuzz_settings(max_examples=60)
    @given(
        body=st.binary(max_size=64)
        | json_values
        | st.builds(lambda k, v: {**FUZZ_BASE, k: v}, st.sampled_from(list(FUZZ_BASE)), json_values),
        signed=st.booleans(),
    )
    def never_a_server_error(body: Any, signed: bool) -> None:
        caplog.clear()
        raw = body if isinstance(body, bytes) else json.dumps(body).encode("utf-8", "surrogatepass")
        headers = sign_headers() if signed else sign_headers("guessed")
        answer = client.post(webhook_url(bot), data=raw, content_type="application/json", headers=headers)
        assert answer.status_code < 500, answer.content
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]

    never_a_server_error()


# -- credentials ------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_credential_schema_is_checked_on_save_over_rest(api_client):
    missing = api_client.post(
        "/api/v1/bots",
        {"bot_id": "dt", "platform": "dingtalk", "credentials": {"client_id": CLIENT_ID, "app_key": "x"}},
        format="json",
    )
    made = api_client.post(
        "/api/v1/bots",
        {"bot_id": "dt", "platform": "dingtalk", "credentials": {"client_id": CLIENT_ID, "client_secret": "s"}},
        format="json",
    )
    emptied = api_client.patch(
        "/api/v1/bots/dt", {"credentials": {"client_id": "", "client_secret": SECRET_MASK}}, format="json"
    )

    assert missing.status_code == 400
    fields = missing.json()["error"]["details"]["fields"]
    assert set(fields) == {"credentials.client_secret", "credentials.app_key"}
    assert made.status_code == 201, made.content
    assert made.json()["credentials"] == {"client_id": SECRET_MASK, "client_secret": SECRET_MASK}
    assert emptied.status_code == 400
    assert set(emptied.json()["error"]["details"]["fields"]) == {"credentials.client_id"}
    assert Bot.objects.get().credentials == {"client_id": CLIENT_ID, "client_secret": "s"}


@pytest.mark.django_db
def test_the_admins_bot_form_shows_the_schema_and_refuses_credentials_that_miss_it(workspace):
    admin = get_user_model().objects.create_superuser("root", "root@example.com", "pw")
    client = Client()
    client.force_login(admin)

    form = client.get("/admin/bindings/bot/add/")
    page = client.post(
        "/admin/bindings/bot/add/",
        {
            "workspace": workspace.pk,
            "bot_id": "dt",
            "name": "DingTalk",
            "platform": "dingtalk",
            "enabled": "on",
            "cred__dingtalk__client_id": CLIENT_ID,  # one field per credential; client_secret left out
        },
    )

    assert "Client Secret (once AppSecret)" in form.content.decode()
    assert page.status_code == 200  # the form again, with its error
    assert "Required for a dingtalk bot." in page.content.decode()
    assert not Bot.objects.exists()


# -- delivery ---------------------------------------------------------------------------------------


@sync_to_async
def _platform_run(fake: FakeDingTalk, dingtalk_bot_for: Callable[..., Bot], message: dict[str, Any]) -> Run:
    workspace = WorkspaceFactory.create()
    AgentBindingFactory.create(workspace=workspace, delivery_policy={"enable_reply": True})
    bot = dingtalk_bot_for(workspace)
    assert post_message(bot, message).status_code == 200
    return Run.objects.get(bot=bot)


@pytest.mark.django_db(transaction=True)
async def test_a_group_reply_goes_to_the_session_webhook_and_ats_the_asker(fake_dingtalk, dingtalk_bot_for):
    message = fake_dingtalk.robot_message("status?", group=True, conversation_id="cidTeam==", staff_id="staff-bo")
    run = await _platform_run(fake_dingtalk, dingtalk_bot_for, message)

    await _deliver(PlatformDeliveryPort(), run, ([_completed("**All green.**")], 0))

    (sent,) = fake_dingtalk.sent
    assert (sent.route, sent.where, sent.msg_key) == ("sessionWebhook", "cidTeam==", "markdown")
    assert sent.text == "@staff-bo **All green.**"
    assert sent.at_users == ["staff-bo"]
    assert not fake_dingtalk.calls_of("accessToken")  # a session webhook needs no token
    assert (await PlatformDelivery.objects.aget(run=run)).status == "delivered"


@pytest.mark.django_db(transaction=True)
async def test_after_the_session_expires_replies_go_through_the_openapi_on_one_token_bought_again_when_refused(
    fake_dingtalk, dingtalk_bot_for
):
    expired = fake_dingtalk.robot_message("first", staff_id="staff-cy", session_expires_in=-1)
    run = await _platform_run(fake_dingtalk, dingtalk_bot_for, expired)
    await _deliver(PlatformDeliveryPort(), run, ([_completed("one")], 0))
    again = fake_dingtalk.robot_message("second", staff_id="staff-cy", session_expires_in=10)  # within the margin
    second = await _platform_run(fake_dingtalk, dingtalk_bot_for, again)
    await _deliver(PlatformDeliveryPort(), second, ([_completed("two")], 0))
    fake_dingtalk.expire_tokens()
    group = fake_dingtalk.robot_message("third", group=True, conversation_id="cidOps==", session_expires_in=-1)
    third = await _platform_run(fake_dingtalk, dingtalk_bot_for, group)
    await _deliver(PlatformDeliveryPort(), third, ([_completed("three")], 0))

    assert fake_dingtalk.texts("user:staff-cy") == ["one", "two"]
    assert fake_dingtalk.texts("cidOps==") == ["three"]
    assert [c.route for c in fake_dingtalk.calls_of("oToMessages.batchSend", "groupMessages.send")] == [
        "oToMessages.batchSend",
        "oToMessages.batchSend",
        "groupMessages.send",  # refused: the token had expired
        "groupMessages.send",
    ]
    assert len(fake_dingtalk.calls_of("accessToken")) == 2  # once, then once more after the refusal
    assert all(s.msg_key == "sampleMarkdown" for s in fake_dingtalk.sent)
    for each in (run, second, third):
        assert (await PlatformDelivery.objects.aget(run=each)).status == "delivered"


@pytest.mark.django_db(transaction=True)
async def test_a_12000_character_reply_becomes_three_messages(fake_dingtalk, dingtalk_bot_for):
    run = await _platform_run(fake_dingtalk, dingtalk_bot_for, fake_dingtalk.robot_message("long", staff_id="staff-di"))
    reply = ("每一句话都是这样写成的，一共二十个字。" * 600).strip()

    await _deliver(PlatformDeliveryPort(), run, ([_completed(reply)], 0))

    texts = fake_dingtalk.texts("cidSinglestaff-di==")
    assert len(texts) == 3
    assert all(len(t) <= 5000 for t in texts)
    assert "".join(texts).replace(" ", "") == reply.replace(" ", "")


@pytest.mark.django_db(transaction=True)
async def test_a_file_the_run_created_is_uploaded_and_sent_through_the_openapi(fake_dingtalk, dingtalk_bot_for):
    run = await _platform_run(
        fake_dingtalk, dingtalk_bot_for, fake_dingtalk.robot_message("report", group=True, conversation_id="cidR==")
    )
    artifact = await sync_to_async(artifact_create_from_bytes)(
        workspace=await sync_to_async(lambda: run.workspace)(),
        data=b"%PDF-1.4 the report",
        name="report.pdf",
        mime_type="application/pdf",
        conversation_id=run.conversation_id,
        source=Artifact.Source.RUNNER,
    )
    created = RunEvent(type="artifact.created", data={"artifact_id": str(artifact.artifact_id), "name": "report.pdf"})

    await _deliver(PlatformDeliveryPort(), run, ([created, _completed("here it is")], 0))

    text, document = fake_dingtalk.sent
    assert (text.route, text.text) == ("sessionWebhook", "@staff-ada here it is")
    assert (document.route, document.where, document.msg_key) == ("groupMessages.send", "cidR==", "sampleFile")
    assert document.params["fileName"] == "report.pdf"
    assert fake_dingtalk.uploads[document.params["mediaId"]] == ("report.pdf", b"%PDF-1.4 the report")
    assert (await PlatformDelivery.objects.aget(run=run)).status == "delivered"
