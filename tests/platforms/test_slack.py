"""Slack end to end on a fake Slack Web API: signed Events API requests in (URL verification answered, forged
or stale signatures refused, a retried event handled once, direct messages and mentions answered, the bot's
own messages not), replies streamed by `chat.postMessage` + `chat.update` in the asking thread, long replies
split, 429s waited out for `Retry-After`, files both ways (shared files fetched with the bot token, the
run's files uploaded by the files upload v2 flow), and a real worker running the qa-runner."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.test import Client

from artifacts.models import Artifact
from artifacts.services import artifact_create_from_bytes
from bindings.models import Bot
from platforms.adapters.slack import SlackAdapter
from platforms.delivery import PlatformDeliveryPort
from platforms.interface import PlatformAPIError, PlatformFileRef
from platforms.models import InboundRefusal, PlatformDelivery
from platforms.services import bot_webhook_register
from platforms.tasks import platform_update_ingest
from runners.actions.delivery import surface_delivery
from runners.models import Run, RunEvent
from tests.factories import AgentBindingFactory, BotFactory, WorkspaceFactory
from tests.fakes.platform_http import serving
from tests.fakes.slack_server import BOT_TOKEN, BOT_USER_ID, SIGNING_SECRET, FakeSlack, sign
from tests.platforms.test_delivery_policy import INTERVAL, _completed, _deliver, _delta, fast_pace  # noqa: F401
from tests.platforms.test_telegram_e2e import _delivery as _delivery_of
from tests.platforms.test_telegram_e2e import _run_of
from transcripts.models import EventLog


@pytest.fixture
def fake_slack() -> Iterator[FakeSlack]:
    with serving(FakeSlack()) as fake:
        yield fake


@pytest.fixture
def slack_bot_for(fake_slack: FakeSlack) -> Callable[..., Bot]:
    def make(workspace: Any, **credentials: Any) -> Bot:
        return BotFactory.create(
            workspace=workspace,
            platform="slack",
            credentials={
                "bot_token": BOT_TOKEN,
                "signing_secret": SIGNING_SECRET,
                "api_base_url": f"{fake_slack.origin}/api",
                **credentials,
            },
        )

    return make


def post_event(
    bot: Bot,
    payload: dict[str, Any],
    *,
    secret: str = SIGNING_SECRET,
    timestamp: int | None = None,
    headers: dict[str, str] | None = None,
) -> Any:
    body = json.dumps(payload).encode()
    return Client().post(
        f"/platforms/slack/{bot.workspace.slug}/{bot.bot_id}/webhook",
        data=body,
        content_type="application/json",
        headers={**sign(body, secret=secret, timestamp=timestamp), **(headers or {})},
    )


# -- inbound ----------------------------------------------------------------------------------------


@pytest.fixture
def bot(workspace: Any, slack_bot_for: Callable[..., Bot]) -> Bot:
    AgentBindingFactory.create(workspace=workspace)
    return slack_bot_for(workspace)


@pytest.mark.django_db
def test_the_url_verification_challenge_is_answered(bot):
    challenge = {
        "token": "x",
        "challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P",
        "type": "url_verification",
    }

    answer = post_event(bot, challenge)

    assert answer.status_code == 200
    assert answer.json() == {"challenge": challenge["challenge"]}


@pytest.mark.django_db
def test_a_forged_or_stale_signature_is_refused_and_recorded(bot, fake_slack):
    payload = fake_slack.event_payload("hello")

    forged = post_event(bot, payload, secret="not-the-signing-secret")
    stale = post_event(bot, payload, timestamp=int(time.time()) - 6 * 60)
    unsigned = Client().post(
        f"/platforms/slack/{bot.workspace.slug}/{bot.bot_id}/webhook", data=payload, content_type="application/json"
    )

    assert (forged.status_code, stale.status_code, unsigned.status_code) == (401, 401, 401)
    assert forged.json()["error"]["code"] == "unauthorized"
    assert not EventLog.objects.exists()
    reasons = list(InboundRefusal.objects.filter(bot=bot).order_by("id").values_list("reason", "count"))
    assert reasons == [("forged", 2), ("replayed", 1)]


@pytest.mark.django_db
def test_a_direct_message_becomes_one_event_however_often_slack_retries_it(bot, fake_slack):
    payload = fake_slack.event_payload("hello there", channel="D0DIRECT", user="U0ADA")

    first = post_event(bot, payload)
    retried = post_event(bot, payload, headers={"X-Slack-Retry-Num": "1", "X-Slack-Retry-Reason": "http_timeout"})

    assert first.status_code == retried.status_code == 200
    event = EventLog.objects.get()
    assert event.source == "platform"
    assert (event.input or {}).get("text") == "hello there"
    assert (event.actor or {}).get("actor_id") == "U0ADA"
    assert event.conversation_id == f"bot:{bot.bot_id}:D0DIRECT"
    assert event.data["reply_target"] == {"chat_id": "D0DIRECT"}
    assert "token" not in event.data["raw"]
    assert Run.objects.count() == 1


@pytest.mark.django_db
def test_in_a_channel_mentions_are_answered_in_their_thread_and_the_bots_own_messages_never(bot, fake_slack):
    channel = {"channel": "C0GENERAL", "channel_type": "channel"}
    chatter = fake_slack.event_payload("people talking", **channel)
    mention = fake_slack.event_payload(
        f"<@{BOT_USER_ID}> summarise this", event_type="app_mention", channel="C0GENERAL"
    )
    in_thread = fake_slack.event_payload(
        f"<@{BOT_USER_ID}> and then?", event_type="app_mention", channel="C0GENERAL", thread_ts="1700000000.000001"
    )
    own = fake_slack.event_payload("an answer", user=BOT_USER_ID, bot_id="B0BOT")
    edited = fake_slack.event_payload("changed", subtype="message_changed")

    for payload in (chatter, mention, in_thread, own, edited):
        assert post_event(bot, payload).status_code == 200

    first, second = EventLog.objects.order_by("id")
    assert (first.input["text"], second.input["text"]) == ("summarise this", "and then?")
    assert first.data["reply_target"] == {"chat_id": "C0GENERAL", "thread_id": mention["event"]["ts"]}
    assert second.data["reply_target"] == {"chat_id": "C0GENERAL", "thread_id": "1700000000.000001"}


@pytest.mark.django_db
def test_a_shared_file_is_fetched_with_the_bot_token_after_the_answer_and_becomes_an_input_artifact(
    bot, fake_slack, monkeypatch, django_capture_on_commit_callbacks
):
    monkeypatch.setattr(platform_update_ingest, "delay", platform_update_ingest)
    shared = fake_slack.add_file("notes.pdf", b"%PDF-1.7 meeting notes", "application/pdf")
    payload = fake_slack.event_payload("what does it say?", files=[shared])

    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        assert post_event(bot, payload).status_code == 200
    assert callbacks

    event = EventLog.objects.get()
    (attachment,) = event.input["attachments"]
    artifact = Artifact.objects.get(artifact_id=attachment["artifact_id"])
    assert (artifact.name, artifact.mime_type, attachment["size"]) == (
        "notes.pdf",
        "application/pdf",
        len(b"%PDF-1.7 meeting notes"),
    )
    assert Run.objects.count() == 1


async def test_the_bot_token_is_never_sent_to_a_file_url_off_slack(fake_slack):
    adapter = SlackAdapter(bot_id="b", credentials={"bot_token": BOT_TOKEN, "api_base_url": f"{fake_slack.origin}/api"})
    elsewhere = PlatformFileRef(
        ref={"file_id": "F1", "url": "https://files.example.net/F1/notes.pdf"}, name="notes.pdf"
    )
    plain_http = PlatformFileRef(ref={"file_id": "F2", "url": "http://files.slack.com/F2/notes.pdf"}, name="notes.pdf")

    for ref in (elsewhere, plain_http):
        with pytest.raises(PlatformAPIError, match="refusing to send the bot token"):
            await adapter.fetch_file(ref)


async def test_a_file_at_an_internal_api_base_url_is_not_fetched_unless_the_operator_allowed_it(fake_slack):
    # api_base_url is a credential a workspace writes; the fake listens on 127.0.0.1, an internal address.
    credentials = {"bot_token": BOT_TOKEN, "api_base_url": f"{fake_slack.origin}/api"}
    ref = PlatformFileRef(ref={"file_id": "F1", "url": f"{fake_slack.origin}/files/F1/notes.pdf"}, name="notes.pdf")

    with pytest.raises(PlatformAPIError, match="address is refused"):
        await SlackAdapter(bot_id="b", credentials=credentials, allow_private=False).fetch_file(ref)


@pytest.mark.django_db
def test_setting_the_webhook_checks_the_token_and_says_where_to_paste_the_url(bot):
    note = bot_webhook_register(bot=bot, url="https://host.example/platforms/slack/x/y/webhook")

    assert "https://host.example/platforms/slack/x/y/webhook" in note
    assert "langbot in Acme" in note


def test_ctx_delivery_says_what_slack_supports():
    slack = surface_delivery("slack")
    assert (slack.supports_streaming, slack.supports_edit, slack.supports_reaction) == (True, True, True)
    assert slack.max_message_size == 4000


# -- delivery ---------------------------------------------------------------------------------------


@sync_to_async
def _platform_run(fake: FakeSlack, slack_bot_for: Callable[..., Bot], payload: dict[str, Any] | None = None) -> Run:
    workspace = WorkspaceFactory.create()
    AgentBindingFactory.create(workspace=workspace, delivery_policy={"enable_reply": True})
    bot = slack_bot_for(workspace)
    assert post_event(bot, payload or fake.event_payload("hi", channel="D0DIRECT")).status_code == 200
    return Run.objects.get(bot=bot)


@pytest.mark.django_db(transaction=True)
async def test_streamed_deltas_become_paced_chat_updates_in_the_asking_thread(fake_slack, slack_bot_for):
    mention = fake_slack.event_payload(f"<@{BOT_USER_ID}> go", event_type="app_mention", channel="C0GENERAL")
    run = await _platform_run(fake_slack, slack_bot_for, mention)
    words = [f"word{i} " for i in range(20)]

    await _deliver(
        PlatformDeliveryPort(), run, *[([_delta(w)], 0.02) for w in words], ([_completed("".join(words).strip())], 0.02)
    )

    assert fake_slack.texts("C0GENERAL") == ["".join(words).strip()]
    writes = fake_slack.calls_of("chat.postMessage", "chat.update")
    assert writes[0].method == "chat.postMessage"
    assert writes[0].params["thread_ts"] == mention["event"]["ts"]
    assert [w.method for w in writes[1:]] == ["chat.update"] * (len(writes) - 1)
    assert 2 <= len(writes) < len(words)
    assert min(b.at - a.at for a, b in itertools.pairwise(writes)) >= INTERVAL * 0.95
    assert (await PlatformDelivery.objects.aget(run=run)).status == "delivered"


@pytest.mark.django_db(transaction=True)
async def test_a_10000_character_reply_is_split_on_sentences_into_slack_sized_messages(fake_slack, slack_bot_for):
    run = await _platform_run(fake_slack, slack_bot_for)
    reply = ("Every sentence here is fifty characters in length. " * 200).strip()

    await _deliver(PlatformDeliveryPort(), run, ([_completed(reply)], 0))

    texts = fake_slack.texts("D0DIRECT")
    assert len(texts) == 3
    assert all(len(t) <= 4000 and t.endswith("length.") for t in texts)
    assert " ".join(texts) == reply


@pytest.mark.django_db(transaction=True)
async def test_a_429_is_waited_out_for_retry_after_and_the_reply_still_arrives(fake_slack, slack_bot_for):
    run = await _platform_run(fake_slack, slack_bot_for)
    fake_slack.rate_limit_next("chat.postMessage", retry_after=1)

    await _deliver(PlatformDeliveryPort(), run, ([_completed("after the flood: 1 < 2 & 3 > 2")], 0))

    refused, accepted = fake_slack.calls_of("chat.postMessage")
    assert (refused.status, refused.error) == (429, "ratelimited")
    assert accepted.at - refused.at >= 1.0
    # Slack's control characters are escaped, so the text shows as written rather than as a link.
    assert fake_slack.texts("D0DIRECT") == ["after the flood: 1 &lt; 2 &amp; 3 &gt; 2"]
    delivery = await PlatformDelivery.objects.aget(run=run)
    assert (delivery.status, delivery.calls) == ("delivered", 2)


@pytest.mark.django_db(transaction=True)
async def test_a_file_the_run_created_is_uploaded_to_the_thread_by_the_upload_v2_flow(fake_slack, slack_bot_for):
    mention = fake_slack.event_payload(f"<@{BOT_USER_ID}> report", event_type="app_mention", channel="C0GENERAL")
    run = await _platform_run(fake_slack, slack_bot_for, mention)
    artifact = await sync_to_async(artifact_create_from_bytes)(
        workspace=await sync_to_async(lambda: run.workspace)(),
        data=b"name,total\nada,3\n",
        name="report.csv",
        mime_type="text/csv",
        conversation_id=run.conversation_id,
        source=Artifact.Source.RUNNER,
    )
    created = RunEvent(type="artifact.created", data={"artifact_id": str(artifact.artifact_id), "name": "report.csv"})

    await _deliver(PlatformDeliveryPort(), run, ([created, _completed("here is the report")], 0))

    steps = [c.method for c in fake_slack.calls_of("files.getUploadURLExternal", "files.completeUploadExternal")]
    assert steps == ["files.getUploadURLExternal", "files.completeUploadExternal"]
    text, upload = fake_slack.sent
    assert text.text == "here is the report"
    assert (upload.kind, upload.file_name, upload.file_bytes) == ("file", "report.csv", b"name,total\nada,3\n")
    assert (upload.channel, upload.thread_ts) == ("C0GENERAL", mention["event"]["ts"])
    assert (await PlatformDelivery.objects.aget(run=run)).status == "delivered"


@pytest.mark.django_db(transaction=True)
async def test_a_revoked_token_fails_the_delivery_and_is_recorded(fake_slack, slack_bot_for):
    run = await _platform_run(fake_slack, slack_bot_for)
    assert run.bot_id is not None
    await Bot.objects.filter(pk=run.bot_id).aupdate(
        credentials={
            "bot_token": "xoxb-revoked",
            "signing_secret": SIGNING_SECRET,
            "api_base_url": f"{fake_slack.origin}/api",
        }
    )

    await _deliver(PlatformDeliveryPort(), run, ([_completed("nobody will see this")], 0))

    delivery = await PlatformDelivery.objects.aget(run=run)
    assert delivery.status == "failed"
    assert "not_authed" in (delivery.error or {})["message"]
    assert delivery.calls == 1  # Slack's own errors are final: not retried


# -- with a real worker and the qa-runner ------------------------------------------------------------


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_a_mention_is_answered_in_its_thread_with_a_reply_that_grows_by_chat_updates(
    worker, qa_binding, slack_bot_for, fake_slack, settings
):
    bot = slack_bot_for(qa_binding().workspace)
    mention = fake_slack.event_payload(f"<@{BOT_USER_ID}> qa:type:1.5 hello", event_type="app_mention", channel="C0E2E")

    assert post_event(bot, mention).status_code == 200

    run = _run_of(bot)
    assert run.status == Run.Status.COMPLETED
    assert _delivery_of(run).status == "delivered"
    assert fake_slack.texts("C0E2E") == [run.output]
    writes = fake_slack.calls_of("chat.postMessage", "chat.update")
    assert writes[0].params["text"] != run.output  # the first write showed the reply still growing
    assert writes[0].params["thread_ts"] == mention["event"]["ts"]
    assert [w.method for w in writes[1:]] == ["chat.update"] * (len(writes) - 1)
