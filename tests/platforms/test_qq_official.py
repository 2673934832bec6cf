"""QQ official bots end to end on a fake QQ Open Platform: the callback URL's validation answered with an
Ed25519 signature QQ's key check accepts (and only for a challenge shaped as QQ sends one), every event's
X-Signature-Ed25519 checked (forged, unsigned and tampered bodies refused and recorded), group @-messages
and one-to-one messages becoming events once however often QQ redelivers them, attachments fetched into
input artifacts, replies sent as passive replies naming the message with a fresh msg_seq each (split at
2,000 characters) on an access token bought once and again only when QQ refuses it, a reply after QQ's
window sent as an active message, the credential schema checked on save, and no body making the webhook
answer 500."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.test import Client
from hypothesis import given
from hypothesis import strategies as st

from artifacts.models import Artifact
from bindings.models import Bot
from platforms.adapters import qq_official
from platforms.delivery import PlatformDeliveryPort
from platforms.models import InboundRefusal, PlatformDelivery
from platforms.tasks import platform_update_ingest
from runners.actions.delivery import surface_delivery
from runners.models import Run
from tests.factories import AgentBindingFactory, BotFactory, WorkspaceFactory
from tests.fakes.platform_http import serving
from tests.fakes.qq_official_server import APP_ID, APP_SECRET, FakeQQOfficial, key_of, signed_headers
from tests.fuzzing import fuzz_settings
from tests.platforms.test_delivery_policy import (  # noqa: F401 (autouse fixtures)
    _close_thread_connections,
    _completed,
    _deliver,
    fast_pace,
)
from transcripts.models import EventLog


@pytest.fixture
def fake_qq() -> Iterator[FakeQQOfficial]:
    qq_official._access_tokens.clear()  # tokens of an earlier test's fake
    with serving(FakeQQOfficial()) as fake:
        yield fake


@pytest.fixture
def qq_bot_for(fake_qq: FakeQQOfficial) -> Callable[..., Bot]:
    def make(workspace: Any) -> Bot:
        return BotFactory.create(
            workspace=workspace,
            platform="qq_official",
            credentials={"app_id": APP_ID, "app_secret": APP_SECRET, "api_base_url": fake_qq.origin},
        )

    return make


@pytest.fixture
def bot(workspace: Any, qq_bot_for: Callable[..., Bot]) -> Bot:
    AgentBindingFactory.create(workspace=workspace)
    return qq_bot_for(workspace)


def post_callback(bot: Bot, body: bytes, *, headers: dict[str, str] | None = None) -> Any:
    url = f"/platforms/qq_official/{bot.workspace.slug}/{bot.bot_id}/webhook"
    given_headers = signed_headers(body) if headers is None else headers
    return Client().post(url, data=body, content_type="application/json", headers=given_headers)


@pytest.mark.django_db
@pytest.mark.parametrize("signed", [True, False], ids=["signed", "unsigned"])
def test_the_callback_validation_is_answered_with_a_signature_qq_accepts(bot, signed):
    body = FakeQQOfficial.validation("Arq0D5A61EgUu4OxUvOp", "1725442341")

    answer = post_callback(bot, body, headers=None if signed else {})

    assert answer.status_code == 200
    found = answer.json()
    assert found["plain_token"] == "Arq0D5A61EgUu4OxUvOp"
    # QQ checks it with the bot's public key over event_ts + plain_token: raises if it does not verify.
    key_of().public_key().verify(bytes.fromhex(found["signature"]), b"1725442341Arq0D5A61EgUu4OxUvOp")


@pytest.mark.django_db
def test_a_challenge_not_shaped_as_qqs_is_not_signed(bot):
    # Signing any text a stranger sends would sign a forged event: `<timestamp>{"op": 0, ...}`.
    forged_event = json.dumps({"op": 0, "t": "C2C_MESSAGE_CREATE"})
    body = json.dumps({"op": 13, "d": {"plain_token": forged_event, "event_ts": "1725442341"}}).encode()

    answer = post_callback(bot, body, headers={})

    assert answer.status_code == 400
    assert "signature" not in answer.json()


@pytest.mark.django_db
def test_group_at_and_one_to_one_messages_become_one_event_each_however_often_delivered(bot, fake_qq):
    group = fake_qq.group_at(" summarise please", group="GRP1", member="MEM1")
    c2c = fake_qq.c2c("hello there", user="USR1")

    for body in (group, group, c2c, c2c):
        answer = post_callback(bot, body)
        assert answer.status_code == 200
        assert answer.json() == {"op": 12, "d": 0}

    events = {str((e.input or {}).get("text")): e for e in EventLog.objects.all()}
    assert set(events) == {"summarise please", "hello there"}
    assert events["summarise please"].conversation_id == f"bot:{bot.bot_id}:group:GRP1"
    assert events["summarise please"].data["chat_type"] == "group"
    assert (events["summarise please"].actor or {})["actor_id"] == "MEM1"
    assert events["hello there"].conversation_id == f"bot:{bot.bot_id}:user:USR1"
    assert Run.objects.count() == 2


@pytest.mark.django_db
def test_the_bot_added_to_a_group_and_a_new_friend_are_events_and_others_are_acknowledged_only(bot, fake_qq):
    added = fake_qq.dispatch("GROUP_ADD_ROBOT", {"group_openid": "GRP1", "op_member_openid": "MEM1", "timestamp": 1})
    friend = fake_qq.dispatch("FRIEND_ADD", {"openid": "USER9", "timestamp": 1})
    removed = fake_qq.dispatch("GROUP_DEL_ROBOT", {"group_openid": "GRP1", "op_member_openid": "MEM1"})

    answers = [post_callback(bot, body) for body in (added, friend, removed, added)]

    assert [(a.status_code, a.json()) for a in answers] == [(200, {"op": 12, "d": 0})] * 4
    events = {e.event_type: e for e in EventLog.objects.all()}
    assert sorted(events) == ["bot.added", "member.joined"]
    assert (events["bot.added"].data["chat_id"], (events["bot.added"].actor or {})["actor_id"]) == (
        "group:GRP1",
        "MEM1",
    )
    # A reply may be passive for 5 minutes by the event's id, as QQ allows for events.
    assert events["bot.added"].data["reply_target"]["extra"]["event_id"] == json.loads(added)["id"]
    assert (events["member.joined"].data["chat_id"], (events["member.joined"].actor or {})["actor_id"]) == (
        "user:USER9",
        "USER9",
    )


@pytest.mark.django_db
def test_forged_unsigned_and_tampered_callbacks_are_refused_and_recorded(bot, fake_qq):
    body = fake_qq.c2c("hi")

    forged = post_callback(bot, body, headers=signed_headers(body, secret="a-guessed-secret-value"))
    unsigned = post_callback(bot, body, headers={})
    tampered = post_callback(bot, body.replace(b'"hi"', b'"ha"'), headers=signed_headers(body))
    not_hex = post_callback(bot, body, headers={**signed_headers(body), "X-Signature-Ed25519": "zz"})

    assert [a.status_code for a in (forged, unsigned, tampered, not_hex)] == [401, 401, 401, 401]
    assert not EventLog.objects.exists()
    assert sum(InboundRefusal.objects.values_list("count", flat=True)) == 4


@pytest.mark.django_db
def test_an_attachment_is_fetched_and_becomes_an_input_artifact(
    bot, fake_qq, monkeypatch, django_capture_on_commit_callbacks
):
    monkeypatch.setattr(platform_update_ingest, "delay", platform_update_ingest)
    url = fake_qq.add_attachment("cat.png", "image/png", b"\x89PNG\r\n\x1a\nfake")
    attachment = {"content_type": "image/png", "filename": "cat.png", "size": 12, "url": url}
    body = fake_qq.c2c("what is this?", attachments=[attachment])

    with django_capture_on_commit_callbacks(execute=True):
        assert post_callback(bot, body).status_code == 200

    event = EventLog.objects.get()
    assert (event.input or {})["text"] == "what is this?"
    (ref,) = (event.input or {})["attachments"]
    stored = Artifact.objects.get(artifact_id=ref["artifact_id"])
    assert (stored.name, stored.mime_type, stored.size) == ("cat.png", "image/png", 12)


def test_ctx_delivery_says_what_qq_official_supports():
    qq = surface_delivery("qq_official")
    assert (qq.supports_edit, qq.supports_reaction, qq.max_message_size) == (False, False, 2000)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=10,
)
callbacks = st.fixed_dictionaries(
    {
        "op": st.sampled_from([0, 13, 12, "0", None]),
        "t": st.sampled_from(["GROUP_AT_MESSAGE_CREATE", "C2C_MESSAGE_CREATE", "X", 1]),
        "d": json_values
        | st.fixed_dictionaries(
            {"id": json_values, "content": json_values, "author": json_values},
            optional={"attachments": json_values, "group_openid": json_values, "timestamp": json_values},
        ),
    }
)


@pytest.mark.django_db
def test_no_signed_body_makes_the_webhook_answer_500(bot, caplog):
    @fuzz_settings(max_examples=80)
    @given(body=json_values | callbacks, signed=st.booleans())
    def never_a_server_error(body: Any, signed: bool) -> None:
        caplog.clear()
        raw = json.dumps(body).encode()
        answer = post_callback(bot, raw, headers=None if signed else {})
        assert answer.status_code < 500, answer.content
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]

    never_a_server_error()


@pytest.mark.django_db
def test_the_credential_schema_is_checked_on_save_over_rest(api_client):
    missing = api_client.post(
        "/api/v1/bots", {"bot_id": "qo", "platform": "qq_official", "credentials": {"app_id": 1}}, format="json"
    )

    assert missing.status_code == 400
    assert set(missing.json()["error"]["details"]["fields"]) == {"credentials.app_secret"}


# -- replies ----------------------------------------------------------------------------------------


@sync_to_async
def _platform_run(fake: FakeQQOfficial, qq_bot_for: Callable[..., Bot], body: bytes) -> Run:
    workspace = WorkspaceFactory.create()
    AgentBindingFactory.create(workspace=workspace, delivery_policy={"enable_reply": True})
    bot = qq_bot_for(workspace)
    assert post_callback(bot, body).status_code == 200
    return Run.objects.get(bot=bot)


@pytest.mark.django_db(transaction=True)
async def test_a_long_reply_is_passive_with_a_fresh_msg_seq_per_part_on_one_token(fake_qq, qq_bot_for):
    run = await _platform_run(fake_qq, qq_bot_for, fake_qq.group_at("tell me", group="GRP1"))
    reply = "A sentence of the long answer. " * 150  # 4,650 characters

    await _deliver(PlatformDeliveryPort(), run, ([_completed(reply)], 0))

    sent = [s for s in fake_qq.sent if s.chat == "group:GRP1"]
    assert [(s.passive, s.msg_seq) for s in sent] == [(True, 1), (True, 2), (True, 3)]
    assert all(len(s.text) <= 2000 for s in sent)
    assert " ".join(s.text for s in sent) == reply.strip()
    assert fake_qq.token_requests == 1
    assert (await PlatformDelivery.objects.aget(run=run)).status == "delivered"


@pytest.mark.django_db(transaction=True)
async def test_a_token_qq_no_longer_takes_is_bought_again_once(fake_qq, qq_bot_for):
    first = await _platform_run(fake_qq, qq_bot_for, fake_qq.c2c("one", user="USR1"))
    await _deliver(PlatformDeliveryPort(), first, ([_completed("first answer")], 0))
    fake_qq.revoke_tokens()
    second = await _platform_run(fake_qq, qq_bot_for, fake_qq.c2c("two", user="USR2"))

    await _deliver(PlatformDeliveryPort(), second, ([_completed("second answer")], 0))

    assert fake_qq.texts("user:USR1") == [(True, "first answer")]
    assert fake_qq.texts("user:USR2") == [(True, "second answer")]
    assert fake_qq.token_requests == 2


@pytest.mark.django_db(transaction=True)
async def test_a_reply_after_qqs_window_goes_as_an_active_message(fake_qq, qq_bot_for):
    run = await _platform_run(fake_qq, qq_bot_for, fake_qq.group_at("slow one", group="GRP9", age_seconds=600))

    await _deliver(PlatformDeliveryPort(), run, ([_completed("late but here")], 0))

    assert fake_qq.texts("group:GRP9") == [(False, "late but here")]
