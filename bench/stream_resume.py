"""Resume over the chat WebSocket: 100 random disconnects and reconnects with `after_id` while runs stream,
then a count of lost and repeated events (docs/architecture.md, "Live delivery": reconnecting with `after_id` loses and
duplicates nothing). Prints `gaps=0 duplicates=0` when correct.

Real processes: daphne, a Celery worker and its plugin runtime. 10 clients each stream stream-probe runs
(60 steps, 2 results per step, 30 ms apart) and drop their socket after a random 3–15 events, wait up to
200 ms, take a new ticket and subscribe again with the last `id` they saw — 10 times each.
"""

from __future__ import annotations

import asyncio
import random
import sys
import time
import uuid
from collections import defaultdict

import httpx

from bench._report import print_table
from bench._stream import ChatClient, Stack, stack

CLIENTS = 10
DISCONNECTS_PER_CLIENT = 10
PROBE = "probe:60:30"


async def resume_client(stack: Stack, http: httpx.AsyncClient, rng: random.Random, seqs: dict[str, list[int]],
                        last_seq: dict[str, int]) -> int:  # fmt: skip
    conversation = f"resume-{uuid.uuid4().hex}"
    client = ChatClient(stack, http)
    await client.connect()
    await client.send(
        {"type": "message", "conversation_id": conversation, "binding_id": stack.binding_id, "text": PROBE}
    )
    last_id = 0
    disconnects = 0
    until_drop = rng.randint(3, 15)
    while True:
        message = await asyncio.wait_for(client.receive(), 60)
        if message["type"] == "error":
            raise RuntimeError(f"server error: {message}")
        if message["type"] != "run.event":
            continue
        last_id = max(last_id, message["id"])
        seqs[message["run_id"]].append(message["seq"])
        if message["event"]["type"] in ("run.completed", "run.failed"):
            last_seq[message["run_id"]] = message["seq"]
            if disconnects >= DISCONNECTS_PER_CLIENT:
                await client.close()
                return disconnects
            await client.send(
                {"type": "message", "conversation_id": conversation, "binding_id": stack.binding_id, "text": PROBE}
            )
        until_drop -= 1
        if until_drop == 0 and disconnects < DISCONNECTS_PER_CLIENT:
            await client.close()
            disconnects += 1
            await asyncio.sleep(rng.uniform(0, 0.2))
            client = ChatClient(stack, http)
            await client.connect()
            await client.send({"type": "subscribe", "conversation_id": conversation, "after_id": last_id})
            until_drop = rng.randint(3, 15)


async def main(stack: Stack) -> int:
    rng = random.Random(5)
    seqs: dict[str, list[int]] = defaultdict(list)
    last_seq: dict[str, int] = {}
    started = time.perf_counter()
    async with httpx.AsyncClient(timeout=30) as http:
        disconnects = await asyncio.gather(*(resume_client(stack, http, rng, seqs, last_seq) for _ in range(CLIENTS)))
    elapsed = time.perf_counter() - started
    duplicates = sum(len(s) - len(set(s)) for s in seqs.values())
    gaps = sum(last_seq.get(run_id, max(s)) - len(set(s)) for run_id, s in seqs.items())
    unfinished = sum(1 for run_id in seqs if run_id not in last_seq)
    print_table(
        [
            ("random disconnects + reconnects with after_id", str(sum(disconnects)), "100"),
            ("runs streamed", str(len(seqs)), "-"),
            ("events received", str(sum(len(s) for s in seqs.values())), "-"),
            ("runs whose end was not seen", str(unfinished), "0"),
            ("gaps (events never received)", str(gaps), "0"),
            ("duplicates (events received twice)", str(duplicates), "0"),
            ("wall time", f"{elapsed:.1f} s", "-"),
        ]
    )
    print(f"gaps={gaps} duplicates={duplicates}")
    return 0 if gaps == 0 and duplicates == 0 and unfinished == 0 else 1


if __name__ == "__main__":
    with stack() as running:
        sys.exit(asyncio.run(main(running)))
