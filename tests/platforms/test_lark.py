"""Lark / Feishu end to end on a fake Open Platform: event subscription v2 pushes in (the URL verification
challenge answered plain and encrypted, a wrong verification token, a bad signature or an undecryptable body
refused, a redelivered event handled once, one-to-one chats and group mentions answered, apps not), replies
as message cards updated in place while streaming, long replies split, the platform's 429 waited out, the
tenant token bought once, images and files both ways, and a real worker running the qa-runner."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.test import Client

from artifacts.models import Artifact
from artifacts.services import artifact_create_from_bytes
from bindings.models import Bot
from platforms.delivery import PlatformDeliveryPort
from platforms.models import InboundRefusal, PlatformDelivery
from platforms.services import bot_webhook_register
from platforms.tasks import platform_update_ingest
from runners.actions.delivery import surface_delivery
from runners.models import Run, RunEvent
from tests.factories import AgentBindingFactory, BotFactory, WorkspaceFactory
from tests.fakes.lark_server import (
    APP_ID,
    APP_SECRET,
    BOT_OPEN_ID,
    ENCRYPT_KEY,
    VERIFICATION_TOKEN,
    FakeLark,
    encrypt,
    sign,
)
from tests.fakes.platform_http import serving
from tests.platforms.test_delivery_policy import INTERVAL, _completed, _deliver, _delta, fast_pace  # noqa: F401
from tests.platforms.test_telegram_e2e import _delivery as _delivery_of
from tests.platforms.test_telegram_e2e import _run_of
from transcripts.models import EventLog


@pytest.fixture
def fake_lark() -> Iterator[FakeLark]:
    with serving(FakeLark()) as fake:
        yield fake


@pytest.fixture
def lark_bot_for(fake_lark: FakeLark) -> Callable[..., Bot]:
    """A Lark bot on the fake; `encrypted=True` gives it the encrypt key too (pushes then come encrypted
    and signed)."""

    def make(workspace: Any, *, encrypted: bool = False, **credentials: Any) -> Bot:
        return BotFactory.create(
            workspace=workspace,
            platform="lark",
            credentials={
                "app_id": APP_ID,
                "app_secret": APP_SECRET,
                "verification_token": VERIFICATION_TOKEN,
                **({"encrypt_key": ENCRYPT_KEY} if encrypted else {}),
                "api_base_url": fake_lark.origin,
                **credentials,
            },
        )

    return make


def post_push(
    bot: Bot, payload: dict[str, Any], *, encrypted: bool = False, headers: dict[str, str] | None = None
) -> Any:
    """Post a push as the platform does: encrypted and signed when the app has an encrypt key."""
    body = json.dumps(encrypt(payload) if encrypted else payload).encode()
    signed = sign(body) if encrypted and payload.get("type") != "url_verification" else {}
    return Client().post(
        f"/platforms/lark/{bot.workspace.slug}/{bot.bot_id}/webhook",
        data=body,
        content_type="application/json",
        headers={**signed, **(headers or {})},
    )


# -- inbound ----------------------------------------------------------------------------------------


@pytest.fixture
def bot(workspace: Any, lark_bot_for: Callable[..., Bot]) -> Bot:
    AgentBindingFactory.create(workspace=workspace)
    return lark_bot_for(workspace)


@pytest.fixture
def encrypted_bot(workspace: Any, lark_bot_for: Callable[..., Bot]) -> Bot:
    AgentBindingFactory.create(workspace=workspace)
    return lark_bot_for(workspace, encrypted=True)


@pytest.mark.django_db
def test_the_url_verification_challenge_is_answered_plain_and_encrypted(bot, encrypted_bot):
    challenge = {"challenge": "ajls384kdjx98XX", "token": VERIFICATION_TOKEN, "type": "url_verification"}

    plain = post_push(bot, challenge)
    sealed = post_push(encrypted_bot, challenge, encrypted=True)
    wrong = post_push(bot, {**challenge, "token": "guessed"})

    assert (plain.status_code, plain.json()) == (200, {"challenge": "ajls384kdjx98XX"})
    assert (sealed.status_code, sealed.json()) == (200, {"challenge": "ajls384kdjx98XX"})
    assert wrong.status_code == 401


@pytest.mark.django_db
def test_a_wrong_token_a_bad_signature_or_an_undecryptable_push_is_refused_and_recorded(bot, encrypted_bot, fake_lark):
    push = fake_lark.message_event("hello")
    wrong_token = {**push, "header": {**push["header"], "token": "guessed"}}
    body = json.dumps(encrypt(push)).encode()
    url = f"/platforms/lark/{encrypted_bot.workspace.slug}/{encrypted_bot.bot_id}/webhook"

    answers = [
        post_push(bot, wrong_token),
        Client().post(url, data=body, content_type="application/json", headers=sign(body, key="not-the-key")),
        post_push(encrypted_bot, push),  # plain, so unsigned
        post_push(encrypted_bot, {"encrypt": "bm90IGNpcGhlcnRleHQgYXQgYWxsIQ=="}),
    ]

    assert [a.status_code for a in answers] == [401, 401, 401, 401]
    assert not EventLog.objects.exists()
    assert sum(InboundRefusal.objects.filter(reason="forged").values_list("count", flat=True)) == 4


@pytest.mark.django_db
def test_a_one_to_one_message_becomes_one_event_however_often_it_is_pushed(encrypted_bot, fake_lark):
    push = fake_lark.message_event("hello there", chat_id="oc_p2p", open_id="ou_ada")

    first = post_push(encrypted_bot, push, encrypted=True)
    again = post_push(encrypted_bot, push, encrypted=True)

    assert first.status_code == again.status_code == 200
    event = EventLog.objects.get()
    assert (event.input or {}).get("text") == "hello there"
    assert (event.actor or {}).get("actor_id") == "ou_ada"
    assert event.conversation_id == f"bot:{encrypted_bot.bot_id}:oc_p2p"
    assert event.data["reply_target"] == {"chat_id": "oc_p2p"}
    assert "token" not in json.dumps(event.data["raw"]["header"])
    assert Run.objects.count() == 1


@pytest.mark.django_db
def test_in_a_group_the_bot_answers_mentions_of_itself_as_replies_and_never_apps(workspace, lark_bot_for, fake_lark):
    AgentBindingFactory.create(workspace=workspace)
    bot = lark_bot_for(workspace, bot_open_id=BOT_OPEN_ID)
    group = {"chat_id": "oc_group", "chat_type": "group"}
    someone_else = {"key": "@_user_1", "id": {"open_id": "ou_bob"}, "name": "Bob"}
    chatter = fake_lark.message_event("people talking", **group)
    other = fake_lark.message_event("@_user_1 lunch?", mentions=[someone_else], **group)
    mention = fake_lark.message_event(
        "@_user_1 ask @_user_2 about this",
        mentions=[fake_lark.bot_mention(), {**someone_else, "key": "@_user_2"}],
        **group,
    )
    app = fake_lark.message_event("@_user_1 hi", mentions=[fake_lark.bot_mention()], sender_type="app", **group)

    for push in (chatter, other, mention, app):
        assert post_push(bot, push).status_code == 200

    event = EventLog.objects.get()
    assert (event.input or {}).get("text") == "ask @Bob about this"
    assert event.data["reply_target"] == {
        "chat_id": "oc_group",
        "reply_to_message_id": mention["event"]["message"]["message_id"],
    }


@pytest.mark.django_db
def test_a_rich_text_post_reaches_the_runner_as_its_title_and_lines(bot, fake_lark):
    post = {
        "title": "Weekly",
        "content": [
            [{"tag": "text", "text": "numbers for "}, {"tag": "a", "text": "the board", "href": "https://x.example"}],
            [{"tag": "text", "text": "thanks "}, {"tag": "at", "user_id": "ou_bob", "user_name": "Bob"}],
        ],
    }

    assert post_push(bot, fake_lark.message_event(message_type="post", content=post)).status_code == 200

    assert (EventLog.objects.get().input or {}).get("text") == "Weekly\nnumbers for the board\nthanks @Bob"


@pytest.mark.django_db
def test_an_image_and_a_file_are_fetched_after_the_answer_and_become_input_artifacts(
    bot, fake_lark, monkeypatch, django_capture_on_commit_callbacks
):
    monkeypatch.setattr(platform_update_ingest, "delay", platform_update_ingest)
    image = fake_lark.message_event(message_type="image", content={"image_key": "img_v3_abc"})
    document = fake_lark.message_event(message_type="file", content={"file_key": "file_v3_def", "file_name": "q3.pdf"})
    fake_lark.add_resource(
        image["event"]["message"]["message_id"], "img_v3_abc", "photo.png", "image/png", b"\x89PNG img"
    )
    fake_lark.add_resource(
        document["event"]["message"]["message_id"], "file_v3_def", "q3.pdf", "application/pdf", b"%PDF q3"
    )

    with django_capture_on_commit_callbacks(execute=True):
        assert post_push(bot, image).status_code == 200
        assert post_push(bot, document).status_code == 200
        assert not fake_lark.calls_of("message_resource.get")  # nothing fetched while the platform waits

    image_event, document_event = EventLog.objects.order_by("id")
    (image_ref,) = (image_event.input or {})["attachments"]
    (document_ref,) = (document_event.input or {})["attachments"]
    stored_image = Artifact.objects.get(artifact_id=image_ref["artifact_id"])
    assert (stored_image.name, stored_image.mime_type) == ("photo.png", "image/png")
    assert (document_ref["name"], document_ref["size"]) == ("q3.pdf", len(b"%PDF q3"))
    assert Run.objects.count() == 2


@pytest.mark.django_db
def test_setting_the_webhook_learns_the_bots_open_id(bot):
    note = bot_webhook_register(bot=bot, url="https://host.example/platforms/lark/x/y/webhook")

    bot.refresh_from_db()
    assert bot.credentials["bot_open_id"] == BOT_OPEN_ID
    assert "https://host.example/platforms/lark/x/y/webhook" in note


def test_ctx_delivery_says_what_lark_supports():
    lark = surface_delivery("lark")
    assert (lark.supports_streaming, lark.supports_edit, lark.supports_reaction) == (True, True, True)
    assert lark.max_message_size == 4000


# -- delivery ---------------------------------------------------------------------------------------


@sync_to_async
def _platform_run(fake: FakeLark, lark_bot_for: Callable[..., Bot], push: dict[str, Any] | None = None) -> Run:
    workspace = WorkspaceFactory.create()
    AgentBindingFactory.create(workspace=workspace, delivery_policy={"enable_reply": True})
    bot = lark_bot_for(workspace)
    assert post_push(bot, push or fake.message_event("hi", chat_id="oc_p2p")).status_code == 200
    return Run.objects.get(bot=bot)


def _card_text(call: Any) -> str:
    card = json.loads(call.params["content"])
    return "".join(e["content"] for e in card["elements"] if e["tag"] == "markdown")


@pytest.mark.django_db(transaction=True)
async def test_streamed_deltas_update_one_card_in_place_ending_with_the_final_text(fake_lark, lark_bot_for):
    run = await _platform_run(fake_lark, lark_bot_for)
    words = [f"word{i} " for i in range(20)]

    await _deliver(
        PlatformDeliveryPort(), run, *[([_delta(w)], 0.02) for w in words], ([_completed("".join(words).strip())], 0.02)
    )

    assert fake_lark.texts("oc_p2p") == ["".join(words).strip()]
    writes = fake_lark.calls_of("message.create", "message.patch")
    assert writes[0].route == "message.create"
    assert writes[0].params["msg_type"] == "interactive"
    assert _card_text(writes[0]) != "".join(words).strip()  # the card was seen growing
    assert [w.route for w in writes[1:]] == ["message.patch"] * (len(writes) - 1)
    assert 2 <= len(writes) < len(words)
    assert min(b.at - a.at for a, b in itertools.pairwise(writes)) >= INTERVAL * 0.95
    assert len(fake_lark.calls_of("tenant_access_token")) == 1  # the token is kept, not bought per call
    assert (await PlatformDelivery.objects.aget(run=run)).status == "delivered"


@pytest.mark.django_db(transaction=True)
async def test_a_10000_character_reply_becomes_three_cards_cut_after_sentences(fake_lark, lark_bot_for):
    run = await _platform_run(fake_lark, lark_bot_for)
    reply = ("Every sentence here is fifty characters in length. " * 200).strip()

    await _deliver(PlatformDeliveryPort(), run, ([_completed(reply)], 0))

    texts = fake_lark.texts("oc_p2p")
    assert len(texts) == 3
    assert all(len(t) <= 4000 and t.endswith("length.") for t in texts)
    assert " ".join(texts) == reply


@pytest.mark.django_db(transaction=True)
async def test_the_platforms_429_is_waited_out_and_the_reply_still_arrives(fake_lark, lark_bot_for):
    run = await _platform_run(fake_lark, lark_bot_for)
    fake_lark.rate_limit_next("message.create", reset=1)

    await _deliver(PlatformDeliveryPort(), run, ([_completed("after the flood")], 0))

    refused, accepted = fake_lark.calls_of("message.create")
    assert (refused.status, refused.code) == (429, 99991400)
    assert accepted.at - refused.at >= 1.0
    assert fake_lark.texts("oc_p2p") == ["after the flood"]
    delivery = await PlatformDelivery.objects.aget(run=run)
    assert (delivery.status, delivery.calls) == ("delivered", 2)


@pytest.mark.django_db(transaction=True)
async def test_an_image_the_run_created_is_uploaded_and_sent_as_a_reply_in_the_group(fake_lark, lark_bot_for):
    push = fake_lark.message_event(
        "@_user_1 chart", chat_id="oc_group", chat_type="group", mentions=[fake_lark.bot_mention()]
    )
    run = await _platform_run(fake_lark, lark_bot_for, push)
    artifact = await sync_to_async(artifact_create_from_bytes)(
        workspace=await sync_to_async(lambda: run.workspace)(),
        data=b"\x89PNG\r\n\x1a\n a chart",
        name="chart.png",
        mime_type="image/png",
        conversation_id=run.conversation_id,
        source=Artifact.Source.RUNNER,
    )
    created = RunEvent(type="artifact.created", data={"artifact_id": str(artifact.artifact_id), "name": "chart.png"})

    await _deliver(PlatformDeliveryPort(), run, ([created, _completed("here is the chart")], 0))

    asked = push["event"]["message"]["message_id"]
    card, image = fake_lark.sent
    assert (card.msg_type, card.text, card.parent_id) == ("interactive", "here is the chart", asked)
    assert (image.msg_type, image.file_bytes, image.parent_id) == ("image", b"\x89PNG\r\n\x1a\n a chart", asked)
    assert [c.route for c in fake_lark.calls_of("image.create", "message.reply")] == [
        "message.reply",
        "image.create",
        "message.reply",
    ]
    assert (await PlatformDelivery.objects.aget(run=run)).status == "delivered"


# -- with a real worker and the qa-runner ------------------------------------------------------------


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_an_encrypted_group_mention_is_answered_with_a_card_that_grows_by_updates(
    worker, qa_binding, lark_bot_for, fake_lark
):
    bot = lark_bot_for(qa_binding().workspace, encrypted=True)
    push = fake_lark.message_event(
        "@_user_1 qa:type:1.5 hello", chat_id="oc_e2e", chat_type="group", mentions=[fake_lark.bot_mention()]
    )

    assert post_push(bot, push, encrypted=True).status_code == 200

    run = _run_of(bot)
    assert run.status == Run.Status.COMPLETED
    assert _delivery_of(run).status == "delivered"
    assert fake_lark.texts("oc_e2e") == [run.output]
    writes = fake_lark.calls_of("message.reply", "message.patch")
    assert writes[0].route == "message.reply"
    assert _card_text(writes[0]) != run.output  # the first card showed the reply still growing
    assert [w.route for w in writes[1:]] == ["message.patch"] * (len(writes) - 1)
    assert min(b.at - a.at for a, b in itertools.pairwise(writes)) >= 0.5 * 0.95  # Lark's own pace
