"""Completion webhook deliveries per second, sustained, and none lost (issue 18: ≥ 1,000/s).

The real path: run ends are recorded by the run-end observer (`runners.lifecycle.observers.runs_ended`,
the outbox, in one transaction per batch of run ends as the worker's finishing writes would), the broker
wakes a Celery worker (threads pool, as `make worker` starts it), which signs each message and POSTs it
with httpx to a local receiver in its own process. The receiver verifies every signature with the
`standardwebhooks` library and answers 204 (a failing receiver's retries are the unit tests' business).

Offered load: `--rate` deliveries per second for `--seconds` (run ends spread over `--endpoints`
endpoints of the workspace). Measured: deliveries accepted by the receiver per second from the first
record to the last acceptance, the latency from record to acceptance, and the count of messages lost
(recorded but never accepted) or accepted twice. PostgreSQL only (the worker's database).
Usage: `python -m bench.webhook_delivery [--rate N] [--seconds S] [--endpoints K]`.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import time
import uuid
from datetime import timedelta
from multiprocessing.connection import Connection
from typing import Any

import psutil

from bench._host import host
from bench._report import percentile, print_table

TARGET_PER_SECOND = 1000
TICK_SECONDS = 0.05
DRAIN_SECONDS = 60.0


# --- the receiver (its own process) ---------------------------------------------------------------------


def _receiver_main(secrets: list[str], port_out: Connection, results_out: Connection, stop: Any) -> None:
    from standardwebhooks.webhooks import Webhook

    verifiers = [Webhook(s) for s in secrets]
    accepted: dict[str, float] = {}
    duplicates = 0
    forged = 0

    def verify(body: bytes, headers: dict[str, str]) -> bool:
        for verifier in verifiers:
            try:
                verifier.verify(body, headers, json_parse=False)
                return True
            except Exception:
                continue
        return False

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal duplicates, forged
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                if verify(body, headers):
                    # One run's message goes to every endpoint under one id: the path tells them apart.
                    key = f"{lines[0].split(' ')[1]} {headers['webhook-id']}"
                    if key in accepted:
                        duplicates += 1
                    accepted[key] = time.time()
                    writer.write(b"HTTP/1.1 204 No Content\r\n\r\n")
                else:
                    forged += 1
                    writer.write(b"HTTP/1.1 401 Unauthorized\r\ncontent-length: 0\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def serve() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=1024)
        port_out.send(server.sockets[0].getsockname()[1])
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, stop.wait)
        server.close()
        results_out.send((accepted, duplicates, forged))

    asyncio.run(serve())


# --- the load -------------------------------------------------------------------------------------------


def _setup(urls: list[str], runs: int) -> tuple[list[str], list[Any]]:
    """Endpoints at the receiver and `runs` ended runs (not yet reported) of the bench workspace."""
    from django.utils import timezone

    from bindings.models import AgentBinding, Workspace
    from platforms.webhooks.models import WebhookEndpoint
    from platforms.webhooks.signing import secret_generate
    from runners.models import Run
    from transcripts.models import EventLog

    workspace = Workspace.objects.get(slug="bench")
    binding = AgentBinding.objects.get(workspace=workspace, binding_id="bench")
    secrets = []
    for url in urls:
        secret = secret_generate()
        WebhookEndpoint.objects.create(
            workspace=workspace, url=url, event_types=["run.completed", "run.failed"], secret=secret
        )
        secrets.append(secret)
    events = EventLog.objects.bulk_create(
        EventLog(workspace=workspace, event_id=f"evt-{uuid.uuid4().hex}", event_type="message.received",
                 source="api", conversation_id=f"c{i}", input={"text": "hi"})
        for i in range(runs)
    )  # fmt: skip
    now = timezone.now()
    ended = Run.objects.bulk_create(
        Run(workspace=workspace, event=event, binding=binding, binding_key=binding.binding_id,
            runner_id=binding.runner_id, conversation_id=event.conversation_id, status=Run.Status.COMPLETED,
            output="QA_OK:hi", started_at=now - timedelta(milliseconds=5), finished_at=now)
        for event in events
    )  # fmt: skip
    return secrets, ended


def _offer(runs: list[Any], per_tick: int) -> float:
    """Report the run ends tick by tick (one transaction per tick); returns when the first was recorded."""
    from django.db import transaction

    from runners.lifecycle.observers import runs_ended

    started = time.time()
    for index, start in enumerate(range(0, len(runs), per_tick)):
        with transaction.atomic():
            runs_ended(runs=runs[start : start + per_tick])
        pause = started + (index + 1) * TICK_SECONDS - time.time()
        if pause > 0:
            time.sleep(pause)
    return started


def _wait_done(total: int) -> None:
    from platforms.webhooks.models import WebhookDelivery

    deadline = time.monotonic() + DRAIN_SECONDS
    while time.monotonic() < deadline:
        if WebhookDelivery.objects.filter(status=WebhookDelivery.Status.SUCCEEDED).count() >= total:
            return
        time.sleep(0.25)


def _cpu(process: psutil.Process) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


def measure(rate: int, seconds: float, endpoints: int, worker_pid: int) -> list[tuple[str, str, str]]:
    from platforms.webhooks.models import WebhookDelivery, WebhookEndpoint

    total_deliveries = int(rate * seconds)
    runs = total_deliveries // endpoints
    total = runs * endpoints
    context = multiprocessing.get_context("spawn")
    port_in, port_out = context.Pipe(duplex=False)
    results_in, results_out = context.Pipe(duplex=False)
    stop = context.Event()

    # Endpoints first (their secrets go to the receiver), then the receiver, then the load.
    placeholder = [f"http://127.0.0.1:1/hooks/{i}" for i in range(endpoints)]
    secrets, ended = _setup(placeholder, runs)
    receiver = context.Process(target=_receiver_main, args=(secrets, port_out, results_out, stop), daemon=True)
    receiver.start()
    port = port_in.recv()
    for i, endpoint in enumerate(WebhookEndpoint.objects.order_by("id")):
        endpoint.url = f"http://127.0.0.1:{port}/hooks/{i}"
        endpoint.save(update_fields=["url"])

    per_tick = max(1, round(rate * TICK_SECONDS / endpoints))
    worker, receiving = psutil.Process(worker_pid), psutil.Process(receiver.pid)
    cpu_before = _cpu(worker), _cpu(receiving), time.process_time()
    started = _offer(ended, per_tick)
    offered_seconds = time.time() - started
    _wait_done(total)
    worker_cpu = _cpu(worker) - cpu_before[0]
    receiver_cpu = _cpu(receiving) - cpu_before[1]
    bench_cpu = time.process_time() - cpu_before[2]
    stop.set()
    accepted, duplicates, forged = results_in.recv()
    receiver.join(10)

    fields = ("event_id", "endpoint_id", "created_at", "delivered_at", "attempts")
    rows = list(WebhookDelivery.objects.values_list(*fields))
    succeeded = [r for r in rows if r[3] is not None]
    latencies = [(r[3] - r[2]).total_seconds() for r in succeeded]
    last = max((r[3] for r in succeeded), default=None)
    span = (last.timestamp() - started) if last is not None else float("nan")
    lost = total - len(succeeded)
    return [
        ("deliveries offered", f"{total} over {offered_seconds:.1f} s ({total / offered_seconds:.0f}/s)", f"{rate}/s"),
        ("deliveries accepted per second (sustained)", f"{len(succeeded) / span:.0f}/s", f"≥ {TARGET_PER_SECOND}/s"),
        ("lost (recorded, never accepted)", str(lost), "0"),
        ("deliveries verified and accepted by the receiver", f"{len(accepted)}/{total}", "all"),
        ("forged or unverifiable", str(forged), "0"),
        ("attempts per delivery (max)", str(max((r[4] for r in rows), default=0)), "1"),
        ("record → accepted p50", f"{percentile(latencies, 50) * 1000:.0f} ms", "-"),
        ("record → accepted p99", f"{percentile(latencies, 99) * 1000:.0f} ms", "-"),
        ("accepted twice (same endpoint, same webhook-id)", str(duplicates), "0"),
        ("worker CPU per delivery (claim, sign, POST, record)", f"{worker_cpu / total * 1000:.2f} ms", "-"),
        ("deliveries per worker CPU-second", f"{total / worker_cpu:.0f}", f"≥ {TARGET_PER_SECOND}"),
        ("CPU of the run-end recording (bench process) / receiver", f"{bench_cpu:.1f} s / {receiver_cpu:.1f} s", "-"),
        ("machine load average (1 min) at the end", f"{psutil.getloadavg()[0]:.1f} on {psutil.cpu_count()} CPUs", "-"),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rate", type=int, default=TARGET_PER_SECOND, help="deliveries offered per second")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--endpoints", type=int, default=4)
    args = parser.parse_args()
    # The receiver listens on 127.0.0.1, which the webhook address guard refuses unless allowed.
    with host(worker_env={"LANGBOT_WEBHOOK_ALLOW_PRIVATE": "true"}) as worker:
        rows = measure(args.rate, args.seconds, args.endpoints, worker.pid)
    print_table(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
