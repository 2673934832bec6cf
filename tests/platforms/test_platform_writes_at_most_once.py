"""A platform write that may have been carried out is never made again: a reply whose send was carried out
but whose answer was lost (the platform hung up) is on the chat once and its delivery records that the
outcome is unknown; a send refused at connect is retried and delivered once; an edit whose answer was lost
is retried (an edit to the same text changes nothing). On fake Telegram, Slack and Discord servers through
the adapters' real SDKs, on a OneBot client that goes away after taking a call, and for a runner's
`message.send` platform action."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import httpx
import pytest
from channels.testing import WebsocketCommunicator
from telegram.error import NetworkError, TimedOut

from langbot_host.asgi import application
from platforms.adapters.slack import SlackAdapter
from platforms.adapters.telegram import TelegramAdapter
from platforms.delivery import OUTCOME_UNKNOWN_CODE, DeliveryFailedError, PlatformDeliveryPort, PlatformWriter
from platforms.interface import PlatformAdapter, PlatformAPIError, ReplyTarget, request_never_sent
from platforms.models import PlatformDelivery
from runners.actions.platform_actions import platform_action_submit
from runners.models import PlatformActionRequest, Run
from tests.factories import AgentBindingFactory
from tests.fakes.discord_server import FakeDiscord
from tests.fakes.slack_server import FakeSlack
from tests.fakes.telegram_server import FakeTelegram
from tests.platforms import test_discord, test_onebot, test_slack
from tests.platforms.conftest import post_update
from tests.platforms.test_delivery_policy import _completed, _deliver, _delta, _platform_run, fast_pace  # noqa: F401
from tests.platforms.test_slack import _platform_run as _slack_run
from transcripts.models import EventLog

CHAT = 4242
# The Slack, Discord and OneBot tests' fixtures: fake Slack and Discord APIs, and bots for each.
fake_slack = test_slack.fake_slack
slack_bot_for = test_slack.slack_bot_for
onebot_bot_for = test_onebot.onebot_bot_for
fake_discord = test_discord.fake_discord
discord_bot_for = test_discord.discord_bot_for


async def _delivery(run: Run) -> PlatformDelivery:
    return await PlatformDelivery.objects.aget(run=run)


def _platform_comes_up_before_the_second_attempt(
    monkeypatch: Any, adapter: type[PlatformAdapter], fake: Any
) -> list[int]:
    """The platform refuses connections until the delivery sends again: the count of send attempts."""
    attempts: list[int] = []
    send_text = adapter.send_text

    async def sending(self: Any, target: ReplyTarget, text: str) -> Any:
        attempts.append(1)
        if len(attempts) == 2:
            await asyncio.to_thread(fake.accept_connections)
        return await send_text(self, target, text)

    monkeypatch.setattr(adapter, "send_text", sending)
    fake.refuse_connections()
    return attempts


async def _stream_then_finish(port: PlatformDeliveryPort, run: Run, fake: Any, first: str, final: str) -> None:
    """Stream `first` (shown by a send), then end the run with `final` (shown by an edit of that message)."""
    port.results_observe(run=run, events=[_delta(first)], ended=False)
    async with asyncio.timeout(10):
        while not fake.sent:  # noqa: ASYNC110 - the fake's server thread has no event to await
            await asyncio.sleep(0.01)
    port.results_observe(run=run, events=[_completed(final)], ended=True)
    await port.wait_idle()


# -- Telegram ---------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
async def test_a_telegram_reply_whose_answer_was_lost_is_posted_once_and_recorded_as_unknown(
    fake_telegram: FakeTelegram, telegram_bot_for: Any
) -> None:
    run = await _platform_run(fake_telegram, telegram_bot_for)
    fake_telegram.hang_up_after_next("sendMessage")

    await _deliver(PlatformDeliveryPort(), run, ([_completed("only once, please")], 0))

    assert fake_telegram.texts(CHAT) == ["only once, please"]
    assert len(fake_telegram.calls_of("sendMessage")) == 1
    delivery = await _delivery(run)
    assert delivery.status == PlatformDelivery.Status.FAILED
    assert delivery.error is not None
    assert delivery.error["code"] == OUTCOME_UNKNOWN_CODE
    assert "outcome unknown; not sent again" in delivery.error["message"]
    assert delivery.calls == 1


@pytest.mark.django_db(transaction=True)
async def test_a_telegram_reply_refused_at_connect_is_sent_again_and_arrives_once(
    fake_telegram: FakeTelegram, telegram_bot_for: Any, monkeypatch: Any
) -> None:
    run = await _platform_run(fake_telegram, telegram_bot_for)
    attempts = _platform_comes_up_before_the_second_attempt(monkeypatch, TelegramAdapter, fake_telegram)

    await _deliver(PlatformDeliveryPort(), run, ([_completed("after the outage")], 0))

    assert len(attempts) == 2
    assert fake_telegram.texts(CHAT) == ["after the outage"]
    assert len(fake_telegram.calls_of("sendMessage")) == 1
    delivery = await _delivery(run)
    assert (delivery.status, delivery.calls) == (PlatformDelivery.Status.DELIVERED, 2)


@pytest.mark.django_db(transaction=True)
async def test_a_telegram_edit_whose_answer_was_lost_is_made_again_and_the_reply_is_delivered(
    fake_telegram: FakeTelegram, telegram_bot_for: Any
) -> None:
    run = await _platform_run(fake_telegram, telegram_bot_for)
    fake_telegram.hang_up_after_next("editMessageText")

    await _stream_then_finish(PlatformDeliveryPort(), run, fake_telegram, "Streaming", "Streaming, then done.")

    assert fake_telegram.texts(CHAT) == ["Streaming, then done."]
    lost, repeated = fake_telegram.calls_of("editMessageText")
    # The lost edit was applied; its repetition changes nothing, which Telegram says with a 400.
    assert (lost.status, repeated.status) == (200, 400)
    delivery = await _delivery(run)
    assert (delivery.status, delivery.calls) == (PlatformDelivery.Status.DELIVERED, 3)


# -- Slack ------------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
async def test_a_slack_reply_whose_answer_was_lost_is_posted_once_and_recorded_as_unknown(
    fake_slack: FakeSlack, slack_bot_for: Any
) -> None:
    run = await _slack_run(fake_slack, slack_bot_for)
    fake_slack.hang_up_after_next("chat.postMessage")

    await _deliver(PlatformDeliveryPort(), run, ([_completed("only once, please")], 0))

    # Neither the host's delivery nor the SDK's own retry handler sent it again.
    assert fake_slack.texts("D0DIRECT") == ["only once, please"]
    assert len(fake_slack.calls_of("chat.postMessage")) == 1
    delivery = await _delivery(run)
    assert delivery.status == PlatformDelivery.Status.FAILED
    assert delivery.error is not None
    assert delivery.error["code"] == OUTCOME_UNKNOWN_CODE
    assert "outcome unknown; not sent again" in delivery.error["message"]


@pytest.mark.django_db(transaction=True)
async def test_a_slack_reply_refused_at_connect_is_sent_again_and_arrives_once(
    fake_slack: FakeSlack, slack_bot_for: Any, monkeypatch: Any
) -> None:
    run = await _slack_run(fake_slack, slack_bot_for)
    attempts = _platform_comes_up_before_the_second_attempt(monkeypatch, SlackAdapter, fake_slack)

    await _deliver(PlatformDeliveryPort(), run, ([_completed("after the outage")], 0))

    assert len(attempts) == 2
    assert fake_slack.texts("D0DIRECT") == ["after the outage"]
    assert len(fake_slack.calls_of("chat.postMessage")) == 1
    assert (await _delivery(run)).status == PlatformDelivery.Status.DELIVERED


@pytest.mark.django_db(transaction=True)
async def test_a_slack_update_whose_answer_was_lost_is_made_again_and_the_reply_is_delivered(
    fake_slack: FakeSlack, slack_bot_for: Any
) -> None:
    run = await _slack_run(fake_slack, slack_bot_for)
    fake_slack.hang_up_after_next("chat.update")

    await _stream_then_finish(PlatformDeliveryPort(), run, fake_slack, "Streaming", "Streaming, then done.")

    assert fake_slack.texts("D0DIRECT") == ["Streaming, then done."]
    assert len(fake_slack.calls_of("chat.postMessage")) == 1
    assert len(fake_slack.calls_of("chat.update")) == 2
    assert (await _delivery(run)).status == PlatformDelivery.Status.DELIVERED


# -- Discord ----------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
async def test_a_discord_reply_whose_answer_was_lost_is_posted_once_and_recorded_as_unknown(
    fake_discord: FakeDiscord, discord_bot_for: Any
) -> None:
    run = await test_discord._platform_run(discord_bot_for, fake_discord)
    fake_discord.hang_up_after_next("POST /channels/{id}/messages")

    await _deliver(PlatformDeliveryPort(), run, ([_completed("only once, please")], 0))

    assert [m.content for m in fake_discord.sent] == ["only once, please"]
    assert len(fake_discord.calls_of("POST /channels/{id}/messages")) == 1
    delivery = await _delivery(run)
    assert delivery.error is not None
    assert (delivery.status, delivery.error["code"], delivery.calls) == ("failed", OUTCOME_UNKNOWN_CODE, 1)


# -- OneBot -----------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
async def test_a_onebot_send_whose_socket_closed_before_its_answer_is_not_sent_again(onebot_bot_for: Any) -> None:
    bot = await test_onebot._bot(onebot_bot_for)
    napcat = WebsocketCommunicator(application, test_onebot.ws_path(bot), headers=test_onebot.napcat_headers())
    assert (await napcat.connect())[0] is True
    await napcat.send_json_to(test_onebot.message_event(test_onebot.text("hello there")))
    event = await test_onebot._until(lambda: EventLog.objects.filter(input__text="hello there").first())
    run = await Run.objects.aget(event__event_id=event.event_id)

    async def napcat_takes_the_call_and_goes_away() -> dict[str, Any]:
        call: dict[str, Any] = await napcat.receive_json_from(timeout=10)
        await napcat.disconnect()
        return call

    going = asyncio.create_task(napcat_takes_the_call_and_goes_away())
    await _deliver(PlatformDeliveryPort(), run, ([_completed("only once, please")], 0))
    call = await going

    assert call["action"] == "send_msg"
    delivery = await _delivery(run)
    assert delivery.error is not None
    assert (delivery.status, delivery.error["code"], delivery.calls) == ("failed", OUTCOME_UNKNOWN_CODE, 1)


# -- a runner's platform action ---------------------------------------------------------------------


@pytest.mark.django_db
def test_a_message_send_action_whose_answer_was_lost_fails_saying_so_and_is_not_sent_again(
    workspace: Any, telegram_bot_for: Any, fake_telegram: FakeTelegram
) -> None:
    AgentBindingFactory.create(workspace=workspace)
    post_update(telegram_bot_for(workspace), fake_telegram.message_update("hi", chat_id=CHAT))
    run = Run.objects.select_related("bot", "event").get()
    fake_telegram.hang_up_after_next("sendMessage")

    request = platform_action_submit(
        run=run,
        capabilities={"actions": ["message.send"], "require_action_approval": False},
        action="message.send",
        target={},
        payload={"text": "a note"},
        origin=PlatformActionRequest.Origin.PROXY,
    )

    assert request.status == PlatformActionRequest.Status.FAILED
    assert request.error is not None
    assert "outcome unknown; not sent again" in request.error["message"]
    assert fake_telegram.texts(CHAT) == ["a note"]
    assert len(fake_telegram.calls_of("sendMessage")) == 1


# -- how failures are classified --------------------------------------------------------------------


def _chained(outer: BaseException, cause: BaseException) -> BaseException:
    outer.__cause__ = cause
    return outer


@pytest.mark.parametrize(
    ("failure", "never_sent"),
    [
        (_chained(NetworkError("httpx.ConnectError: refused"), httpx.ConnectError("refused")), True),
        (_chained(TimedOut(), httpx.ConnectTimeout("connect")), True),
        (_chained(TimedOut(), httpx.PoolTimeout("pool")), True),
        (_chained(TimedOut(), httpx.ReadTimeout("read")), False),
        (_chained(TimedOut(), httpx.WriteTimeout("write")), False),
        (_chained(NetworkError("httpx.RemoteProtocolError"), httpx.RemoteProtocolError("gone")), False),
        (NetworkError("Bad Gateway (502)"), False),
        (aiohttp.ClientConnectorError.__new__(aiohttp.ClientConnectorError), True),
        (aiohttp.ServerDisconnectedError(), False),
        (aiohttp.SocketTimeoutError(), False),
    ],
)
def test_only_a_failure_before_the_request_left_counts_as_never_sent(failure: BaseException, never_sent: bool) -> None:
    assert request_never_sent(failure) is never_sent


@pytest.mark.parametrize(
    ("cause", "unknown"), [(httpx.ConnectError("refused"), False), (httpx.ReadTimeout("read"), True)]
)
async def test_telegram_calls_that_fail_on_the_way_are_retryable_and_unknown_only_after_the_request_left(
    cause: Exception, unknown: bool
) -> None:
    adapter = TelegramAdapter(bot_id="b", credentials={"token": "1:x"})

    async def failing() -> None:
        raise TimedOut() from cause

    with pytest.raises(PlatformAPIError) as raised:
        await adapter._call(failing)

    assert (raised.value.retryable, raised.value.outcome_unknown) == (True, unknown)


async def test_a_write_is_not_made_again_after_an_unknown_outcome_but_an_edit_is() -> None:
    calls: list[str] = []

    async def flaky(kind: str) -> str:
        calls.append(kind)
        if len(calls) == 1:
            raise PlatformAPIError("connection reset", retryable=True, outcome_unknown=True)
        return kind

    writer = PlatformWriter(adapter=None, interval=0)  # type: ignore[arg-type]
    with pytest.raises(DeliveryFailedError) as failed:
        await writer.call(flaky, "send")
    calls.clear()
    edited = await writer.call(flaky, "edit", idempotent=True)

    assert failed.value.code == OUTCOME_UNKNOWN_CODE
    assert (edited, calls) == ("edit", ["edit", "edit"])
