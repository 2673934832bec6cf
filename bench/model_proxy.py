"""Model calls through the host's proxy against the same calls made directly (docs/operations.md, "Performance targets":
streamed tokens/s ratio ≥ 0.95, first chunk + ≤ 5 ms; issue 16).

Real processes: a Celery worker with its plugin runtime (`bench/_host.py`), which also loads
`bench/plugins/model-probe`, and a local OpenAI-compatible fake provider (`bench/_fake_provider.py`,
its own process). Each phase is one run of the probe runner, started by an event through the gateway and
awaited by the bench's driver. Inside the runtime, the runner times its model's calls through
`api.models.invoke` / `api.models.stream` (runtime → worker → provider → worker → runtime) and the same
request sent from the runtime's process straight to the fake with the `openai` SDK, alternating which goes
first; it replies with the raw timings, which the bench reads from the run's output.

- invoke: `--invokes` sequential calls; overhead = proxy − direct, per pair of neighbouring calls, split by
  the worker's own time per call (`duration_ms` of its proxy call audit rows) into the worker's handler
  (model lookup, checks, its provider call beyond the direct one) and the rest (both SDK ends, runtime, wire).
- stream, flat out: `--streams` streams of 2,000 chunks sent without delay; tokens/s per stream.
- stream, paced: `--paced` streams at 50 chunks/s (the first chunk also after 20 ms); first-chunk delay
  added = proxy − direct time to the first chunk, per pair; the same for the last chunk, and tokens/s.

Usage: `python -m bench.model_proxy [--invokes N] [--streams N] [--paced N]`. Needs DATABASE_URL=postgres://
and Redis (see bench/_host.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from typing import Any

from asgiref.sync import sync_to_async

from bench._host import REPO, Driver, ensure_threads, host
from bench._report import percentile, print_table

PLUGIN_DIRS = [REPO / "plugins", REPO / "bench" / "plugins"]
RUNNER_ID = "plugin:langbot-bench/model-probe/probe"
MODEL_ID = "bench-llm"
MODEL_NAME = "bench-model"
FLAT_CHUNKS = 2000
PACED_CHUNKS = 25
PACED_INTERVAL_MS = 20.0
FIRST_CHUNK_TARGET_MS = 5.0
RATIO_TARGET = 0.95

Samples = dict[str, list[float]]


def start_provider() -> tuple[subprocess.Popen[str], str]:
    """The fake provider in its own process (same process group as the bench) and its base URL."""
    process = subprocess.Popen(
        [sys.executable, "-m", "bench._fake_provider"], cwd=REPO, stdout=subprocess.PIPE, text=True
    )
    assert process.stdout is not None
    line = process.stdout.readline().split()
    if len(line) != 2 or line[0] != "port":
        process.kill()
        raise SystemExit(f"the fake provider did not start (said {line!r})")
    return process, f"http://127.0.0.1:{line[1]}/v1"


def stop_provider(process: subprocess.Popen[str]) -> None:
    process.terminate()
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()


def _setup(base_url: str) -> Any:
    """A workspace with the fake as its provider, one LLM model on it, and a binding of the probe runner
    allowed to invoke and stream that model (a deadline long enough for the slowest phase)."""
    from django.db import close_old_connections

    from tests.factories import AgentBindingFactory, ModelFactory, ModelProviderFactory, WorkspaceFactory

    try:
        # The fake provider listens on loopback: allowed for this workspace, as an operator allows a
        # self-hosted model (the outbound guard refuses private addresses otherwise).
        workspace = WorkspaceFactory.create(slug="bench-model", allow_private_addresses=True)
        provider = ModelProviderFactory.create(workspace=workspace, base_url=base_url, api_key="bench", max_retries=0)
        ModelFactory.create(workspace=workspace, provider=provider, model_id=MODEL_ID, name=MODEL_NAME)
        AgentBindingFactory.create(
            workspace=workspace,
            binding_id="model-probe",
            runner_id=RUNNER_ID,
            runner_config={"model": MODEL_ID},
            resource_policy={"allowed_model_ids": [MODEL_ID]},
            timeout_seconds=600,
        )
        return workspace
    finally:
        close_old_connections()


def _run_of(conversation: str) -> tuple[str, str, str, Any]:
    from django.db import close_old_connections

    from runners.models import Run

    try:
        run = Run.objects.get(conversation_id=conversation)
        return str(run.run_id), str(run.status), run.output, run.error
    finally:
        close_old_connections()


def _handler_seconds(run_id: str, action: str, count: int) -> list[float]:
    """The worker's own time in each of the run's last `count` calls of `action` (from the proxy call
    audit, written in batches shortly after the calls), in call order; [] if they do not all appear."""
    from django.db import close_old_connections

    from runners.models import ProxyCallAudit

    try:
        for _ in range(50):
            rows = ProxyCallAudit.objects.filter(run_id=run_id, action=action, outcome="ok").order_by("id")
            durations = [row / 1000 for row in rows.values_list("duration_ms", flat=True)]
            if len(durations) >= count:
                return durations[-count:]
            time.sleep(0.1)
        return []
    finally:
        close_old_connections()


async def phase(driver: Driver, spec: dict[str, Any]) -> dict[str, Samples]:
    """One run of the probe; its timings (for invoke also `handler`: the worker's own time per call), or
    SystemExit when the run did not complete."""
    conversation = f"model-proxy-{spec['phase']}-{uuid.uuid4().hex[:8]}"
    elapsed, status = await driver.run_one(json.dumps(spec), conversation)
    run_id, run_status, output, error = await sync_to_async(_run_of, thread_sensitive=False)(conversation)
    if status != "completed" or run_status != "completed":
        raise SystemExit(f"the {spec['phase']} run ended {status}/{run_status} after {elapsed:.1f} s: {error}")
    answer: dict[str, Any] = json.loads(output)
    result = {"proxy": answer["proxy"], "direct": answer["direct"]}
    if spec["phase"] == "invoke":
        seconds = await sync_to_async(_handler_seconds, thread_sensitive=False)(run_id, "invoke_llm", spec["count"])
        result["handler"] = {"total": seconds}
    return result


def differences(result: dict[str, Samples], key: str) -> list[float]:
    return [p - d for p, d in zip(result["proxy"][key], result["direct"][key], strict=True)]


def rates(samples: Samples) -> list[float]:
    return [tokens / total for tokens, total in zip(samples["tokens"], samples["total"], strict=True) if total > 0]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


def rows_of(
    invoke: dict[str, Samples], flat: dict[str, Samples], paced: dict[str, Samples]
) -> list[tuple[str, str, str]]:
    overhead = differences(invoke, "total")
    handler = invoke["handler"]["total"]
    in_handler = [h - d for h, d in zip(handler, invoke["direct"]["total"], strict=False)]
    outside = [p - h for p, h in zip(invoke["proxy"]["total"], handler, strict=False)]
    first_added = differences(paced, "first")
    end_added = differences(paced, "total")
    direct_rate = statistics.median(rates(flat["direct"]))
    proxy_rate = statistics.median(rates(flat["proxy"]))
    ratio = proxy_rate / direct_rate
    paced_ratio = statistics.median(rates(paced["proxy"])) / statistics.median(rates(paced["direct"]))
    first_p50 = percentile(first_added, 50) * 1000
    frames = {path: sorted(set(flat[path]["frames"]) | set(paced[path]["frames"])) for path in ("proxy", "direct")}
    return [
        (f"invoke, direct p50 / p99 ({len(overhead)} calls)", f"{ms(percentile(invoke['direct']['total'], 50))} / "
         f"{ms(percentile(invoke['direct']['total'], 99))}", "-"),
        ("invoke, through the proxy p50 / p99", f"{ms(percentile(invoke['proxy']['total'], 50))} / "
         f"{ms(percentile(invoke['proxy']['total'], 99))}", "-"),
        ("invoke, host overhead (proxy − direct) p50 / p99", f"{ms(percentile(overhead, 50))} / "
         f"{ms(percentile(overhead, 99))}", "-"),
        ("  of which in the worker's handler (its time − direct) p50 / p99",
         f"{ms(percentile(in_handler, 50))} / {ms(percentile(in_handler, 99))}", "-"),
        ("  of which outside it: SDK, runtime, wire (proxy − handler) p50 / p99",
         f"{ms(percentile(outside, 50))} / {ms(percentile(outside, 99))}", "-"),
        (f"stream {FLAT_CHUNKS} chunks flat out, direct (median of {len(flat['direct']['total'])})",
         f"{direct_rate:,.0f} tokens/s", "-"),
        ("stream flat out, through the proxy (median)", f"{proxy_rate:,.0f} tokens/s", "-"),
        ("stream flat out, tokens/s ratio proxy / direct", f"{ratio:.2f}",
         f"≥ {RATIO_TARGET}" + (" ✓" if ratio >= RATIO_TARGET else " ✗")),
        (f"stream at 50 chunks/s, first chunk direct p50 ({len(first_added)} streams)",
         ms(percentile(paced["direct"]["first"], 50)), "-"),
        ("stream at 50 chunks/s, first chunk through the proxy p50", ms(percentile(paced["proxy"]["first"], 50)), "-"),
        ("stream at 50 chunks/s, first-chunk delay added p50 / p99",
         f"{ms(percentile(first_added, 50))} / {ms(percentile(first_added, 99))}",
         f"p50 ≤ {FIRST_CHUNK_TARGET_MS:g} ms" + (" ✓" if first_p50 <= FIRST_CHUNK_TARGET_MS else " ✗")),
        ("stream at 50 chunks/s, end-of-stream delay added p50 / p99",
         f"{ms(percentile(end_added, 50))} / {ms(percentile(end_added, 99))}", "-"),
        ("stream at 50 chunks/s, tokens/s ratio proxy / direct", f"{paced_ratio:.3f}", "-"),
        ("chunks per stream received, proxy / direct (paced, flat)", f"{frames['proxy']} / {frames['direct']}",
         "equal"),
    ]  # fmt: skip


async def measure(base_url: str, args: argparse.Namespace) -> list[tuple[str, str, str]]:
    ensure_threads(16)
    driver = Driver()
    await driver.start()
    driver.workspace = await sync_to_async(_setup, thread_sensitive=False)(base_url)
    common = {"base_url": base_url, "model_name": MODEL_NAME}
    invoke = await phase(driver, {**common, "phase": "invoke", "count": args.invokes, "warmup": 10})
    flat = await phase(
        driver,
        {**common, "phase": "stream", "count": args.streams, "warmup": 2, "chunks": FLAT_CHUNKS, "interval_ms": 0},
    )
    paced = await phase(
        driver,
        {**common, "phase": "stream", "count": args.paced, "warmup": 2, "chunks": PACED_CHUNKS,
         "interval_ms": PACED_INTERVAL_MS},
    )  # fmt: skip
    await driver.stop()
    return rows_of(invoke, flat, paced)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--invokes", type=int, default=200)
    parser.add_argument("--streams", type=int, default=10)
    parser.add_argument("--paced", type=int, default=30)
    args = parser.parse_args()
    # Read by the worker's runtime and by this process's (which lists the runners for the catalog).
    os.environ["LANGBOT_PLUGIN_DIRS"] = os.pathsep.join(str(path) for path in PLUGIN_DIRS)
    provider, base_url = start_provider()
    try:
        with host():
            rows = asyncio.run(measure(base_url, args))
    finally:
        stop_provider(provider)
    print_table(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
