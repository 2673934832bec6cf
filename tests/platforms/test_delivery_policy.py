"""The host's delivery policy on a chat platform, driven with a run's committed results as the worker hands
them over (`PlatformDeliveryPort.results_observe`) and watched on a fake Telegram: paced streaming edits that
end with the final text, long replies split, 429 honoured, files uploaded, failures recorded on the run."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import connections

from artifacts.models import Artifact
from artifacts.services import artifact_create_from_bytes
from platforms.delivery import PlatformDeliveryPort
from platforms.models import PlatformDelivery
from runners.actions.delivery import deliveries_drain, run_results_observe
from runners.models import Run, RunEvent
from tests.factories import AgentBindingFactory, WorkspaceFactory
from tests.host.test_metrics import process_samples
from tests.platforms.conftest import post_update

pytestmark = pytest.mark.django_db(transaction=True)
INTERVAL = 0.1


@pytest.fixture(autouse=True)
def fast_pace(settings: Any) -> None:
    settings.LANGBOT_PLATFORM_EDIT_INTERVAL = INTERVAL


@pytest.fixture(autouse=True)
async def _close_thread_connections() -> AsyncIterator[None]:
    yield
    # The async ORM's thread keeps a connection, which would hold the test database open at its teardown.
    await sync_to_async(connections.close_all)()


def _delta(text: str) -> RunEvent:
    return RunEvent(type="message.delta", data={"chunk": {"role": "assistant", "content": text}})


def _completed(text: str) -> RunEvent:
    return RunEvent(type="message.completed", data={"message": {"role": "assistant", "content": text}})


@sync_to_async
def _platform_run(fake: Any, telegram_bot_for: Any, delivery_policy: dict[str, Any] | None = None, **creds: Any) -> Run:
    workspace = WorkspaceFactory.create()
    AgentBindingFactory.create(workspace=workspace, delivery_policy=delivery_policy or {"enable_reply": True})
    bot = telegram_bot_for(workspace, **creds)
    assert post_update(bot, fake.message_update("hi", chat_id=4242)).status_code == 200
    return Run.objects.get(bot=bot)


async def _deliver(port: PlatformDeliveryPort, run: Run, *batches: tuple[list[RunEvent], float]) -> None:
    """Hand the batches over as the worker would, each after its pause; the last one ends the run."""
    for index, (events, pause) in enumerate(batches):
        await asyncio.sleep(pause)
        port.results_observe(run=run, events=events, ended=index == len(batches) - 1)
    await port.wait_idle()


async def _delivery(run: Run) -> PlatformDelivery:
    return await PlatformDelivery.objects.aget(run=run)


async def test_streamed_deltas_become_paced_edits_of_one_message_ending_with_the_final_text(
    fake_telegram, telegram_bot_for
):
    run = await _platform_run(fake_telegram, telegram_bot_for)
    port = PlatformDeliveryPort()
    words = [f"word{i} " for i in range(30)]

    await _deliver(port, run, *[([_delta(w)], 0.02) for w in words], ([_completed("".join(words).strip())], 0.02))

    assert fake_telegram.texts(4242) == ["".join(words).strip()]
    writes = fake_telegram.calls_of("sendMessage", "editMessageText")
    assert writes[0].method == "sendMessage"
    assert len(writes) >= 3  # the reply was seen growing, not only at the end
    # 30 deltas over ~0.6 s: coalesced, never two writes to the chat closer than the interval.
    assert len(writes) < len(words)
    gaps = [b.at - a.at for a, b in itertools.pairwise(writes)]
    assert min(gaps) >= INTERVAL * 0.95
    delivery = await _delivery(run)
    assert delivery.status == "delivered"
    assert delivery.message_ids == [str(fake_telegram.sent[0].message_id)]


async def test_a_10000_character_reply_is_split_on_sentences_into_telegram_sized_messages(
    fake_telegram, telegram_bot_for
):
    run = await _platform_run(fake_telegram, telegram_bot_for)
    sentence = "Every sentence here is fifty characters in length. "
    reply = (sentence * 200).strip()

    await _deliver(PlatformDeliveryPort(), run, ([_completed(reply)], 0))

    texts = fake_telegram.texts(4242)
    assert len(texts) == 3
    assert all(len(t) <= 4096 and t.endswith("length.") for t in texts)
    assert " ".join(texts) == reply
    assert len((await _delivery(run)).message_ids) == 3


async def test_the_bindings_max_message_size_narrows_the_platform_limit(fake_telegram, telegram_bot_for):
    run = await _platform_run(
        fake_telegram, telegram_bot_for, delivery_policy={"enable_reply": True, "max_message_size": 100}
    )

    await _deliver(PlatformDeliveryPort(), run, ([_completed("A short line of text. " * 10)], 0))

    texts = fake_telegram.texts(4242)
    assert len(texts) == 3
    assert all(len(t) <= 100 for t in texts)


async def test_a_429_is_waited_out_for_retry_after_and_the_reply_still_arrives(fake_telegram, telegram_bot_for):
    run = await _platform_run(fake_telegram, telegram_bot_for)
    fake_telegram.rate_limit_next("sendMessage", retry_after=1)

    started = time.monotonic()
    await _deliver(PlatformDeliveryPort(), run, ([_completed("after the flood")], 0))

    refused, accepted = fake_telegram.calls_of("sendMessage")
    assert refused.status == 429
    assert accepted.at - refused.at >= 1.0
    assert time.monotonic() - started < 5
    assert fake_telegram.texts(4242) == ["after the flood"]
    delivery = await _delivery(run)
    assert delivery.status == "delivered"
    assert delivery.calls == 2


async def test_a_delivery_that_finally_fails_is_recorded_and_leaves_the_run_as_it_was(fake_telegram, telegram_bot_for):
    run = await _platform_run(fake_telegram, telegram_bot_for, token="1:revoked-token")
    await Run.objects.filter(pk=run.pk).aupdate(status=Run.Status.COMPLETED)
    failed = ("langbot_platform_deliveries_total", (("outcome", "failed"), ("platform", "telegram")))
    before = process_samples().get(failed, 0)

    await _deliver(PlatformDeliveryPort(), run, ([_completed("nobody will see this")], 0))

    delivery = await _delivery(run)
    assert delivery.status == "failed"
    assert delivery.error is not None
    assert "Unauthorized" in delivery.error["message"]
    assert delivery.message_ids == []
    assert (await Run.objects.aget(pk=run.pk)).status == Run.Status.COMPLETED
    assert process_samples().get(failed, 0) - before == 1


async def test_an_artifact_the_run_created_is_uploaded_to_the_chat_after_the_text(fake_telegram, telegram_bot_for):
    run = await _platform_run(fake_telegram, telegram_bot_for)
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

    text, document = fake_telegram.sent
    assert text.text == "here is the report"
    assert (document.kind, document.file_name, document.file_bytes) == (
        "document",
        "report.csv",
        b"name,total\nada,3\n",
    )
    assert len((await _delivery(run)).message_ids) == 2


async def test_an_observer_run_delivers_nothing(fake_telegram, telegram_bot_for):
    run = await _platform_run(fake_telegram, telegram_bot_for)
    run.is_observer = True

    await _deliver(PlatformDeliveryPort(), run, ([_completed("not for the chat")], 0))

    assert fake_telegram.sent == []
    assert not await PlatformDelivery.objects.filter(run=run).aexists()


async def test_a_stopping_worker_lets_a_reply_in_flight_end_with_its_final_text(fake_telegram, telegram_bot_for):
    run = await _platform_run(fake_telegram, telegram_bot_for)
    # What the orchestrator hands over, through the port platforms installed at start-up.
    run_results_observe(run=run, events=[_delta("half of it")], ended=False)
    run_results_observe(run=run, events=[_completed("half of it and the rest")], ended=True)

    await deliveries_drain(timeout=5)

    assert fake_telegram.texts(4242) == ["half of it and the rest"]


async def test_two_replies_in_one_chat_at_once_keep_to_the_chats_pace_together(fake_telegram, telegram_bot_for):
    first = await _platform_run(fake_telegram, telegram_bot_for)

    @sync_to_async
    def second_run() -> Run:
        assert first.bot is not None
        assert post_update(first.bot, fake_telegram.message_update("again", chat_id=4242)).status_code == 200
        return Run.objects.exclude(pk=first.pk).get(bot=first.bot)

    second = await second_run()
    port = PlatformDeliveryPort()

    await asyncio.gather(
        _deliver(port, first, *[([_delta(f"a{i} ")], 0.03) for i in range(8)], ([_completed("first answer")], 0)),
        _deliver(port, second, *[([_delta(f"b{i} ")], 0.03) for i in range(8)], ([_completed("second answer")], 0)),
    )

    assert sorted(fake_telegram.texts(4242)) == ["first answer", "second answer"]
    writes = fake_telegram.calls_of("sendMessage", "editMessageText")
    assert min(b.at - a.at for a, b in itertools.pairwise(writes)) >= INTERVAL * 0.95


async def test_a_change_of_the_bots_credentials_takes_effect_on_its_next_reply(fake_telegram, telegram_bot_for):
    first = await _platform_run(fake_telegram, telegram_bot_for)
    port = PlatformDeliveryPort()
    await _deliver(port, first, ([_completed("with the first token")], 0))

    @sync_to_async
    def revoke_and_ask_again() -> Run:
        bot = first.bot
        assert bot is not None
        bot.credentials = {**bot.credentials, "token": "1:revoked-token"}
        bot.save(update_fields=["credentials"])
        post_update(bot, fake_telegram.message_update("again", chat_id=4242))
        return Run.objects.exclude(pk=first.pk).get(bot=bot)

    second = await revoke_and_ask_again()
    await _deliver(port, second, ([_completed("with the revoked token")], 0))

    assert fake_telegram.texts(4242) == ["with the first token"]
    assert (await _delivery(second)).status == "failed"


async def test_a_runner_that_does_not_stream_gets_its_reply_sent_whole_not_edited_in_pieces(
    fake_telegram, telegram_bot_for
):
    run = await _platform_run(fake_telegram, telegram_bot_for)
    # As the worker stores it when the runner's manifest declares `streaming: false`.
    await Run.objects.filter(pk=run.pk).aupdate(authorization={"delivery": {"streaming": False}})
    words = [f"word{i} " for i in range(10)]

    await _deliver(
        PlatformDeliveryPort(), run, *[([_delta(w)], 0.02) for w in words], ([_completed("".join(words).strip())], 0.02)
    )

    assert fake_telegram.texts(4242) == ["".join(words).strip()]
    assert [call.method for call in fake_telegram.calls_of("sendMessage", "editMessageText")] == ["sendMessage"]
