"""Chat platform latency as a Telegram user sees it: an update posted to the bot's webhook → the first message
of the reply on the (fake) Telegram Bot API (issue 18: inbound webhook → first platform write, p50/p99).

The stack is the one `make run` starts (`bench/_stack.py`: daphne, the worker with the `make run` settings,
the plugin runtime over WebSocket), on PostgreSQL and on SQLite. The bench process runs a fake Telegram Bot
API (`tests/fakes/telegram_server.py`, the wire format of the real one) and a Telegram bot pointed at it by
`api_base_url`, then posts real-shaped updates (`qa:stream:3 ...`, each in its own chat so Telegram's pace
of one write a second per chat never delays a first message) over HTTP to
`/platforms/telegram/<workspace>/<bot>/webhook`. Measured per update: the webhook's answer, and the first
`sendMessage` of the reply arriving at the fake (daphne, the webhook view, the gateway, the broker, the
worker, the runtime, the first result's write and the delivery's first call). Sequentially, then from 16
concurrent clients.

Exits 1 when a database could not be measured; a missed target is reported, never failed.
Usage: `python -m bench.platform_first_edit [--updates N] [--databases postgresql,sqlite]`.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

import httpx

from bench._host import ms
from bench._report import percentile
from bench._stack import NotMeasuredError, UserStack, measure_each, print_by_database, rows_emit, user_stack

LABELS = {"postgresql": "HTTP, PostgreSQL", "sqlite": "HTTP, SQLite"}
SECRET = "bench-secret"
FIRST_WRITE_TIMEOUT = 30.0


def _telegram_bot(stack: UserStack, api_base_url: str) -> tuple[str, str]:
    from django.db import close_old_connections

    from bindings.models import AgentBinding
    from tests.factories import BotFactory
    from tests.fakes.telegram_server import BOT_USERNAME, TOKEN

    try:
        workspace = AgentBinding.objects.select_related("workspace").get(binding_id=stack.binding_id).workspace
        if workspace is None:
            raise RuntimeError("the stack's binding is global; a bot needs a workspace")
        bot = BotFactory.create(
            workspace=workspace,
            bot_id="bench-telegram",
            platform="telegram",
            credentials={
                "token": TOKEN,
                "secret_token": SECRET,
                "api_base_url": api_base_url,
                "username": BOT_USERNAME,
            },
        )
        return workspace.slug, bot.bot_id
    finally:
        close_old_connections()


async def _first_write(fake: Any, chat_id: int) -> float:
    deadline = time.monotonic() + FIRST_WRITE_TIMEOUT
    while time.monotonic() < deadline:
        calls = fake.calls_of("sendMessage")
        for call in calls:
            if call.params.get("chat_id") == chat_id:
                return float(call.at)
        await asyncio.sleep(0.001)
    raise NotMeasuredError(f"no reply reached chat {chat_id} within {FIRST_WRITE_TIMEOUT:.0f}s")


async def _updates(
    stack: UserStack, fake: Any, url: str, count: int, concurrency: int, first_chat: int
) -> tuple[list[float], list[float]]:
    answered: list[float] = []
    first: list[float] = []
    chats = iter(range(first_chat, first_chat + count))
    headers = {"X-Telegram-Bot-Api-Secret-Token": SECRET}

    async def client(http: httpx.AsyncClient) -> None:
        for chat in chats:
            update = fake.message_update("qa:stream:3 hello", chat_id=chat)
            started = time.monotonic()
            answer = await http.post(url, json=update, headers=headers)
            if answer.status_code != 200:
                raise NotMeasuredError(f"the webhook answered {answer.status_code}: {answer.text[:200]}")
            answered.append(time.monotonic() - started)
            first.append(await _first_write(fake, chat) - started)

    async with httpx.AsyncClient(base_url=stack.base, timeout=30) as http:
        await asyncio.gather(*(client(http) for _ in range(concurrency)))
    return answered, first


async def measure(stack: UserStack, fake: Any, url: str, updates: int) -> list[tuple[str, str, str]]:
    await _updates(stack, fake, url, 20, 4, 10_000)  # warm up
    answered, first = await _updates(stack, fake, url, updates, 1, 20_000)
    answered_16, first_16 = await _updates(stack, fake, url, updates * 2, 16, 30_000)
    return [
        ("sequential: webhook answered p50", ms(percentile(answered, 50)), "-"),
        ("sequential: first message p50", ms(percentile(first, 50)), "-"),
        ("sequential: first message p99", ms(percentile(first, 99)), "-"),
        ("concurrency 16: webhook answered p50", ms(percentile(answered_16, 50)), "-"),
        ("concurrency 16: first message p50", ms(percentile(first_16, 50)), "-"),
        ("concurrency 16: first message p99", ms(percentile(first_16, 99)), "-"),
        ("replies seen", f"{len(first) + len(first_16)}/{updates * 3}", "all"),
    ]


def only(kind: str, updates: int) -> int:
    from tests.fakes.platform_http import serving
    from tests.fakes.telegram_server import FakeTelegram

    try:
        with user_stack(kind) as stack, serving(FakeTelegram()) as fake:
            slug, bot_id = _telegram_bot(stack, fake.origin)
            url = f"/platforms/telegram/{slug}/{bot_id}/webhook"
            rows = asyncio.run(measure(stack, fake, url, updates))
    except NotMeasuredError as exc:
        print(f"not measured: {exc}")
        return 1
    rows_emit(rows)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--updates", type=int, default=100)
    parser.add_argument("--databases", default="postgresql,sqlite")
    parser.add_argument("--only", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.only:
        return only(args.only, args.updates)
    kinds = [k for k in args.databases.split(",") if k]
    return print_by_database(measure_each("platform_first_edit", kinds, ["--updates", str(args.updates)]), LABELS)


if __name__ == "__main__":
    raise SystemExit(main())
