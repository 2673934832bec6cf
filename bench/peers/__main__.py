"""This host beside LangBot 4.11.2 and the LangGraph dev server (in-memory), same client, same load.

Each system is started on loopback ports, given one agent that answers at once, and driven through HTTP by
the same httpx client: a sequential pass (one client, each request sent when the last one's answer came)
for the latency, then 16 and 64 concurrent clients for the throughput. Each request is a new conversation,
so no system serialises requests of one conversation.

- this host: `POST /api/v1/events?wait=10` to the stack `make run` starts (`bench/_stack.py`), the
  qa-runner's `ok`, once on SQLite (the embedded default) and once on PostgreSQL (DATABASE_URL);
- LangBot: `POST /api/v1/agents/{uuid}/debug` (its agent debug endpoint, which runs the agent and answers
  with the whole run), the LangBot-SDK echo runner installed as a LangBot user installs a plugin;
- LangGraph: `POST /runs/wait` to `langgraph dev` serving `bench/peers/langgraph_echo`.

Installed by `make bench-peers` under var/peers/ (each in its own virtualenv). A system that cannot be
started is reported as not measured; the others still are.
Usage: `python -m bench.peers [--systems langbot,langgraph,sqlite,postgresql] [--seconds S] [--sequential N]`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from bench._host import REPO, ms
from bench._report import percentile, print_grid
from bench._stack import NotMeasuredError, measure_each, rows_emit, user_stack

PEERS = REPO / "var" / "peers"
LANGBOT_VENV = PEERS / "langbot-venv"
LANGGRAPH_VENV = PEERS / "langgraph-venv"
LBP_ECHO = REPO / "tests" / "langbot_plugin" / "plugins" / "lbp-echo"
LANGGRAPH_APP = Path(__file__).resolve().parent / "langgraph_echo"
START_SECONDS = 300.0
CLIENT_COUNTS = (16, 64)

LABELS = {
    "langbot": "LangBot 4.11.2",
    "langgraph": "LangGraph dev (in-memory)",
    "sqlite": "this host, SQLite (make run)",
    "postgresql": "this host, PostgreSQL",
}

# One request as the client sends it: True when the system answered with a finished run.
Send = Callable[[httpx.AsyncClient], Awaitable[bool]]


@dataclass
class Load:
    sequential: int
    seconds: float


# --- the client --------------------------------------------------------------------------------------


async def _timed(send: Send, client: httpx.AsyncClient) -> tuple[float, bool]:
    started = time.perf_counter()
    try:
        ok = await send(client)
    except httpx.HTTPError:
        ok = False
    return time.perf_counter() - started, ok


async def drive(send: Send, load: Load) -> list[tuple[str, str, str]]:
    """The rows for one system: sequential p50 / p95, then runs/s at each client count."""
    limits = httpx.Limits(max_connections=max(CLIENT_COUNTS), max_keepalive_connections=max(CLIENT_COUNTS))
    async with httpx.AsyncClient(limits=limits, timeout=60) as client:
        for _ in range(10):  # warm up: first requests pay for imports and caches
            await _timed(send, client)
        latencies: list[float] = []
        failed = 0
        for _ in range(load.sequential):
            elapsed, ok = await _timed(send, client)
            if ok:
                latencies.append(elapsed)
            else:
                failed += 1
        rows = [
            ("sequential p50 / p95", f"{ms(percentile(latencies, 50))} / {ms(percentile(latencies, 95))}"
             if latencies else "-", "-"),
        ]  # fmt: skip
        for clients in CLIENT_COUNTS:
            done, errors, elapsed = await _concurrent(send, client, clients, load.seconds)
            failed += errors
            rows.append((f"runs/s at {clients} clients", f"{done / elapsed:.0f}", "-"))
        rows.append(("failed requests", str(failed), "0"))
        return rows


async def _concurrent(send: Send, client: httpx.AsyncClient, clients: int, seconds: float) -> tuple[int, int, float]:
    """`clients` clients sending back to back for `seconds`: runs finished, requests failed, wall seconds."""
    deadline = time.perf_counter() + seconds
    counts = {"done": 0, "failed": 0}

    async def one() -> None:
        while time.perf_counter() < deadline:
            _, ok = await _timed(send, client)
            counts["done" if ok else "failed"] += 1

    started = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(clients)))
    return counts["done"], counts["failed"], time.perf_counter() - started


# --- processes ---------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def _process(
    args: list[str], cwd: Path, log: Path, env: dict[str, str] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen(
        args, cwd=cwd, env={**os.environ, **(env or {})}, stdout=log.open("wb"), stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        yield process
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(20)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)


def _wait_until(ready: Callable[[], bool], process: subprocess.Popen[bytes], log: Path, what: str) -> None:
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise NotMeasuredError(f"{what}: exited with {process.returncode}; see {log}")
        with contextlib.suppress(httpx.HTTPError):
            if ready():
                return
        time.sleep(1)
    raise NotMeasuredError(f"{what}: not ready after {START_SECONDS:.0f} s; see {log}")


# --- LangBot -----------------------------------------------------------------------------------------


def _langbot_json(answer: httpx.Response) -> dict[str, object]:
    body = answer.json()
    if answer.status_code != 200 or body.get("code") != 0:
        raise NotMeasuredError(f"LangBot answered {answer.status_code}: {answer.text[:300]}")
    return body.get("data") or {}


def _langbot_setup(base: str, home: Path, runtime: subprocess.Popen[bytes], log: Path) -> tuple[str, str]:
    """A first user, the echo plugin installed through LangBot's plugin API and an agent using it: the token
    and the agent's uuid."""
    account = {"user": "bench@example.com", "password": f"bench-{uuid.uuid4().hex}"}
    _langbot_json(httpx.post(f"{base}/api/v1/user/init", json=account, timeout=30))
    token = str(_langbot_json(httpx.post(f"{base}/api/v1/user/auth", json=account, timeout=30))["token"])
    headers = {"Authorization": f"Bearer {token}"}
    build = home / "build" / LBP_ECHO.name
    shutil.copytree(LBP_ECHO, build)
    subprocess.run([str(LANGBOT_VENV / "bin" / "lbp"), "build"], cwd=build, check=True, capture_output=True)
    package = next((build / "dist").glob("*.lbpkg"))
    with package.open("rb") as file:
        _langbot_json(httpx.post(f"{base}/api/v1/plugins/install/local", headers=headers,
                                 files={"file": (package.name, file)}, timeout=60))  # fmt: skip
    runner = "plugin:lbptest/lbp-echo/echo"

    def installed() -> bool:
        answer = httpx.get(f"{base}/api/v1/agents/_/metadata", headers=headers, timeout=10)
        return runner in answer.text

    _wait_until(installed, runtime, log, "the echo plugin in LangBot")
    agent = _langbot_json(httpx.post(f"{base}/api/v1/agents", headers=headers, timeout=30,
                                     json={"name": "bench", "kind": "agent"}))  # fmt: skip
    return token, str(agent["uuid"])


def measure_langbot(load: Load) -> list[tuple[str, str, str]]:
    python = LANGBOT_VENV / "bin" / "python"
    if not python.exists():
        raise NotMeasuredError(f"{python} is missing: run `make bench-peers`")
    home = PEERS / "langbot-home"
    shutil.rmtree(home, ignore_errors=True)
    (home / "runtime").mkdir(parents=True)
    control, debug, port = _free_port(), _free_port(), _free_port()
    base = f"http://127.0.0.1:{port}"
    runtime_log, host_log = home / "runtime.log", home / "langbot.log"
    runtime_args = [str(LANGBOT_VENV / "bin" / "lbp"), "rt", "--ws-control-port", str(control),
                    "--ws-debug-port", str(debug), "--skip-deps-check"]  # fmt: skip
    # LangBot reads `SECTION__KEY` variables over its generated config.yaml.
    env = {"API__PORT": str(port), "PLUGIN__RUNTIME_WS_URL": f"ws://127.0.0.1:{control}/control/ws"}
    with (
        _process(runtime_args, home / "runtime", runtime_log) as runtime,
        _process([str(python), "-m", "langbot"], home, host_log, env) as host,
    ):
        _wait_until(lambda: httpx.get(f"{base}/api/v1/user/init", timeout=3).status_code == 200, host, host_log,
                    "LangBot")  # fmt: skip
        token, agent = _langbot_setup(base, home, runtime, runtime_log)
        headers = {"Authorization": f"Bearer {token}"}

        async def send(client: httpx.AsyncClient) -> bool:
            answer = await client.post(
                f"{base}/api/v1/agents/{agent}/debug", headers=headers,
                json={"text": "ok", "conversation_id": f"bench-{uuid.uuid4().hex}"},
            )  # fmt: skip
            return answer.status_code == 200 and answer.json().get("code") == 0

        return asyncio.run(drive(send, load))


# --- LangGraph ---------------------------------------------------------------------------------------


def measure_langgraph(load: Load) -> list[tuple[str, str, str]]:
    cli = LANGGRAPH_VENV / "bin" / "langgraph"
    if not cli.exists():
        raise NotMeasuredError(f"{cli} is missing: run `make bench-peers`")
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    log = PEERS / "langgraph-dev.log"
    # The dev server keeps its in-memory store's snapshots beside the graph: a copy under var/ gets them.
    app = PEERS / "langgraph-app"
    shutil.rmtree(app, ignore_errors=True)
    shutil.copytree(LANGGRAPH_APP, app)
    args = [str(cli), "dev", "--no-browser", "--no-reload", "--port", str(port), "--host", "127.0.0.1"]
    with _process(args, app, log) as server:
        _wait_until(lambda: httpx.get(f"{base}/ok", timeout=3).status_code == 200, server, log, "langgraph dev")

        async def send(client: httpx.AsyncClient) -> bool:
            answer = await client.post(f"{base}/runs/wait", json={"assistant_id": "echo", "input": {"text": "ok"}})
            return answer.status_code == 200 and answer.json().get("text") == "ok"

        return asyncio.run(drive(send, load))


# --- this host ---------------------------------------------------------------------------------------


def measure_host(kind: str, load: Load) -> list[tuple[str, str, str]]:
    with user_stack(kind) as stack:

        async def send(client: httpx.AsyncClient) -> bool:
            answer = await client.post(
                f"{stack.base}/api/v1/events?wait=10", headers=stack.headers,
                json={"conversation_id": f"bench-{uuid.uuid4().hex}", "input": {"text": "ok"}},
            )  # fmt: skip
            runs = answer.json().get("runs") if answer.status_code == 200 else None
            return isinstance(runs, list) and bool(runs) and runs[0].get("status") == "completed"

        return asyncio.run(drive(send, load))


MEASURES: dict[str, Callable[[Load], list[tuple[str, str, str]]]] = {
    "langbot": measure_langbot,
    "langgraph": measure_langgraph,
    "sqlite": lambda load: measure_host("sqlite", load),
    "postgresql": lambda load: measure_host("postgresql", load),
}


def only(system: str, load: Load) -> int:
    try:
        rows = MEASURES[system](load)
    except NotMeasuredError as exc:
        print(f"not measured: {exc}")
        return 1
    rows_emit(rows)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--systems", default="langbot,langgraph,sqlite,postgresql")
    parser.add_argument("--sequential", type=int, default=100, help="requests in the sequential pass")
    parser.add_argument("--seconds", type=float, default=20.0, help="seconds of each concurrent pass")
    parser.add_argument("--only", help=argparse.SUPPRESS)
    args = parser.parse_args()
    load = Load(args.sequential, args.seconds)
    if args.only:
        return only(args.only, load)
    systems = [s for s in args.systems.split(",") if s]
    unknown = sorted(set(systems) - set(MEASURES))
    if unknown:
        parser.error(f"unknown systems {unknown}; choose from {sorted(MEASURES)}")
    # Each system in a child process of its own: this host's measurement sets Django up on its database.
    results = measure_each("peers", systems, ["--sequential", str(args.sequential), "--seconds", str(args.seconds)])
    measured = {s: rows for s, rows in results.items() if isinstance(rows, list)}
    metrics = [metric for metric, _, _ in next(iter(measured.values()), [])]
    if metrics:
        values = {(s, m): v for s, rows in measured.items() for m, v, _ in rows}
        grid = [[m, *(values.get((s, m), "-") for s in measured)] for m in metrics]
        print_grid(["", *(LABELS[s] for s in measured)], grid)
    for system, why in results.items():
        if isinstance(why, str):
            print(f"NOT MEASURED: {LABELS[system]}: {why}")
    print(f"load: {args.sequential} sequential requests; {args.seconds:.0f} s at each of {CLIENT_COUNTS} clients; "
          f"{os.cpu_count()} cores, shared by every system's processes and the client")  # fmt: skip
    return 0 if len(measured) == len(systems) else 1


if __name__ == "__main__":
    sys.exit(main())
