"""Starting and stopping the real peers `make peers` installed under var/peers, and setting each up through
its own API the way a user would in its UI: Langflow (its virtualenv's `langflow run`) with a superuser, an
API key and the echo flow of `langflow_flow`; n8n (`var/peers/n8n`'s `n8n start`) with the workflows of
`n8n_workflows` imported and published through its command line before it starts.

A peer counts as started once it can do what the tests ask of it, not when its health check first answers:
n8n's `/healthz` answers as soon as its HTTP server listens, before it has registered the webhooks of its
published workflows, and a request sent in between gets a 404."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.peers.langflow_flow import echo_flow_create

REPO_ROOT = Path(__file__).resolve().parents[2]
PEERS_DIR = REPO_ROOT / "var" / "peers"
LANGFLOW = PEERS_DIR / "langflow-venv" / "bin" / "langflow"
N8N = PEERS_DIR / "n8n" / "node_modules" / ".bin" / "n8n"
# Both take a while to migrate their databases and load their nodes on a busy machine.
START_TIMEOUT = 300.0
LANGFLOW_USER = ("langbot-admin", "langbot-admin-password-1")
LANGFLOW_ENDPOINT = "langbot-echo"


@dataclass
class LangflowPeer:
    base_url: str
    api_key: str
    flow_id: str
    endpoint_name: str
    client: httpx.Client
    """Signed in as the superuser (Langflow's own API: flows, stored messages)."""

    def session_messages(self, session_id: str) -> list[dict[str, object]]:
        """The messages Langflow stored in a session, oldest first."""
        answer = self.client.get("/api/v1/monitor/messages", params={"session_id": session_id})
        answer.raise_for_status()
        messages: list[dict[str, object]] = answer.json()
        return sorted(messages, key=lambda m: str(m["timestamp"]))


@dataclass
class N8nPeer:
    base_url: str
    header_name: str
    header_value: str

    def webhook(self, path: str) -> str:
        return f"{self.base_url}/webhook/{path}"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _installed(path: Path) -> None:
    if not path.exists():
        pytest.fail(f"{path} is missing: `make peers` installs it")


@contextlib.contextmanager
def _process(argv: list[str], *, env: dict[str, str], log_path: Path, ready: Callable[[], bool]) -> Iterator[None]:
    """Run `argv` (its own process group) until the block ends; wait for `ready()` to say yes first."""
    with log_path.open("wb") as log:
        process = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if ready():
                    break
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"{argv[0]} did not start:\n{log_path.read_text(errors='replace')[-4000:]}")
            time.sleep(1)
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _answers_200(url: str) -> Callable[[], bool]:
    return lambda: httpx.get(url, timeout=2).status_code == 200


def _webhooks_registered(base_url: str, paths: list[str]) -> Callable[[], bool]:
    """Whether n8n has registered a production webhook on every path. n8n answers a CORS preflight (`OPTIONS`)
    on a registered path with 204 and on any other path with an error, without running the workflow."""
    return lambda: all(httpx.options(f"{base_url}/webhook/{path}", timeout=2).status_code == 204 for path in paths)


@contextlib.contextmanager
def langflow_start(directory: Path) -> Iterator[LangflowPeer]:
    _installed(LANGFLOW)
    port = _free_port()
    base_url = f"http://127.0.0.1:{port}"
    env = {
        **os.environ,
        "LANGFLOW_CONFIG_DIR": str(directory),
        "LANGFLOW_AUTO_LOGIN": "false",
        "LANGFLOW_SUPERUSER": LANGFLOW_USER[0],
        "LANGFLOW_SUPERUSER_PASSWORD": LANGFLOW_USER[1],
        "LANGFLOW_DO_NOT_TRACK": "true",
    }
    argv = [str(LANGFLOW), "run", "--host", "127.0.0.1", "--port", str(port), "--backend-only", "--no-open-browser"]
    with _process(argv, env=env, log_path=directory / "langflow.log", ready=_answers_200(f"{base_url}/health")):
        client = httpx.Client(base_url=base_url, timeout=60)
        login = client.post("/api/v1/login", data={"username": LANGFLOW_USER[0], "password": LANGFLOW_USER[1]})
        login.raise_for_status()
        client.headers["Authorization"] = f"Bearer {login.json()['access_token']}"
        key = client.post("/api/v1/api_key/", json={"name": "langbot"})
        key.raise_for_status()
        flow_id = echo_flow_create(client, endpoint_name=LANGFLOW_ENDPOINT)
        try:
            yield LangflowPeer(base_url, key.json()["api_key"], flow_id, LANGFLOW_ENDPOINT, client)
        finally:
            client.close()


@contextlib.contextmanager
def n8n_start(directory: Path) -> Iterator[N8nPeer]:
    from tests.peers.n8n_workflows import HEADER_NAME, HEADER_VALUE, WEBHOOK, credentials, workflows

    _installed(N8N)
    port = _free_port()
    base_url = f"http://127.0.0.1:{port}"
    env = {
        **os.environ,
        "N8N_USER_FOLDER": str(directory),
        "N8N_PORT": str(port),
        "N8N_LISTEN_ADDRESS": "127.0.0.1",
        "N8N_HOST": "127.0.0.1",
        # Its task broker (which runs Code nodes) listens on a fixed port unless told otherwise.
        "N8N_RUNNERS_BROKER_PORT": str(_free_port()),
        "N8N_ENCRYPTION_KEY": "langbot-peers-test-encryption-key",
        "N8N_DIAGNOSTICS_ENABLED": "false",
        "N8N_VERSION_NOTIFICATIONS_ENABLED": "false",
        "N8N_PERSONALIZATION_ENABLED": "false",
        "N8N_SECURE_COOKIE": "false",
        "N8N_LOG_LEVEL": "info",
    }
    (directory / "credentials.json").write_text(json.dumps(credentials()))
    (directory / "workflows.json").write_text(json.dumps(workflows()))
    for command in (
        ["import:credentials", f"--input={directory / 'credentials.json'}"],
        ["import:workflow", f"--input={directory / 'workflows.json'}"],
        *[["publish:workflow", f"--id={workflow['id']}"] for workflow in workflows()],
    ):
        done = subprocess.run([str(N8N), *command], env=env, capture_output=True, text=True, timeout=START_TIMEOUT)
        assert done.returncode == 0, (command, done.stdout[-2000:], done.stderr[-2000:])
    paths = [
        node["parameters"]["path"] for workflow in workflows() for node in workflow["nodes"] if node["type"] == WEBHOOK
    ]
    ready = _webhooks_registered(base_url, paths)
    with _process([str(N8N), "start"], env=env, log_path=directory / "n8n.log", ready=ready):
        yield N8nPeer(base_url, HEADER_NAME, HEADER_VALUE)
