"""Issue 21's live-development acceptance, as an author does it, against daphne and a Celery worker: scaffold
a plugin with `python -m langbot_sdk new`, its own tests pass, connect it with `python -m langbot_sdk dev`
and a development token, chat with it through a binding, edit the runner file, and the next reply shows the
edit — the host never restarts. Every step is the real command in its own process, started from the
author's directory outside the repository; the edited runner answers in the debug chat's socket."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import websockets
from websockets.typing import Origin

from bindings.services import api_key_create
from runtimes.dev_access import dev_token_create
from tests.factories import WorkspaceFactory

pytestmark = pytest.mark.django_db(transaction=True)

RUNNER_ID = "plugin:alice/echoer/default"


def _author_env() -> dict[str, str]:
    """The author's shell: none of the host's settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "DATABASE_", "LANGBOT_"))}
    return {**env, "PYTHONUNBUFFERED": "1"}


class Terminal:
    """A command's output, line by line, as the author's terminal shows it."""

    def __init__(self, argv: list[str], cwd: Path) -> None:
        self.process = subprocess.Popen(
            argv,
            cwd=cwd,
            env=_author_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
            # Ctrl-C as in a terminal, even when the suite was started in the background with SIGINT ignored.
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        self.lines: list[str] = []
        self._changed = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()

    def wait_for(self, pattern: str, *, after: int = 0, timeout: float = 30) -> int:
        """The index of the first line from `after` on matching `pattern`."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                for index in range(after, len(self.lines)):
                    if re.search(pattern, self.lines[index]):
                        return index
                remaining = deadline - time.monotonic()
                exited = self.process.poll() is not None and not self._changed.wait(0.2)  # and said all it had
                if remaining <= 0 or exited:
                    pytest.fail(f"no line matching {pattern!r}; the terminal shows:\n" + "\n".join(self.lines))
                self._changed.wait(min(remaining, 0.5))

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(5)
        # The CLI starts its runtime in a session of its own (langbot_sdk/dev.py), which the kill above does
        # not reach: a CLI killed mid-stop would leave it running after the test.
        for line in self.lines:
            if found := re.search(r"local runtime \(pid (\d+)\)", line):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(found.group(1)), signal.SIGKILL)


@pytest.fixture
def terminals() -> Iterator[list[Terminal]]:
    started: list[Terminal] = []
    yield started
    for terminal in started:
        terminal.stop()


def test_scaffold_test_connect_chat_edit_and_chat_again_without_restarting_the_host(
    worker, start_web, terminals, tmp_path
):
    web = start_web()
    workspace = WorkspaceFactory.create()
    _, api_key = api_key_create(workspace=workspace)
    _, dev_token = dev_token_create(workspace=workspace)
    home = tmp_path / "author"
    home.mkdir()

    scaffold = subprocess.run(
        [sys.executable, "-m", "langbot_sdk", "new", "alice/echoer"],
        cwd=home,
        env=_author_env(),
        capture_output=True,
        text=True,
    )
    assert scaffold.returncode == 0, scaffold.stderr
    plugin = home / "echoer"
    # The host's virtualenv has pytest-django, which an author's does not: it stays out of their run.
    tested = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:django"],
                            cwd=plugin, env=_author_env(), capture_output=True, text=True, timeout=120)  # fmt: skip
    assert tested.returncode == 0, tested.stdout + tested.stderr

    dev = Terminal([sys.executable, "-m", "langbot_sdk", "dev", "--host", web.url, "--token", dev_token], plugin)
    terminals.append(dev)
    registered = dev.wait_for(rf"registered 1 development runner\(s\) for workspace {workspace.slug}.*{RUNNER_ID}")

    with httpx.Client(base_url=web.url, headers={"Authorization": f"Bearer {api_key}"}, timeout=60) as me:
        binding = {
            "binding_id": "echoer",
            "name": "Echoer",
            "scope": {"scope_type": "workspace"},
            "event_types": ["message.received"],
            "runner_id": RUNNER_ID,
            "runner_config": {"prefix": "echo: "},
        }
        assert me.post("/api/v1/bindings", json=binding).status_code == 201

        def chat(text: str) -> str:
            response = me.post("/api/v1/events?wait=30", json={"conversation_id": "dev", "input": {"text": text}})
            assert response.status_code == 200, response.text
            [run] = response.json()["runs"]
            assert run["status"] == "completed", run
            return str(run["output"])

        assert chat("hello") == "echo: hello"

        runner_file = plugin / "components" / "agent_runner" / "default.py"
        source = runner_file.read_text()
        edited = source.replace('prefix + (ctx.input.text or "")', 'prefix + (ctx.input.text or "").upper() + "!"')
        assert edited != source, "the scaffold's runner changed shape; update the edit"
        runner_file.write_text(edited)
        dev.wait_for(rf"reloaded: {RUNNER_ID}", after=registered)
        dev.wait_for(r"registered 1 development runner", after=registered + 1)

        ticket = me.post("/api/v1/ws-tickets")
        assert ticket.status_code == 201, ticket.text
        socket_url = web.url.replace("http://", "ws://") + ticket.json()["url"]
        assert asyncio.run(debug_chat(socket_url, web.url, "echoer", "hello again")) == "echo: HELLO AGAIN!"


async def debug_chat(url: str, origin: str, binding_id: str, text: str) -> str:
    """What the debug chat page does: send a message to a binding over /ws/v1/chat/ and read the reply."""
    async with websockets.connect(url, origin=Origin(origin), open_timeout=30) as socket:
        await socket.send(json.dumps({"type": "message", "binding_id": binding_id, "text": text}))
        async with asyncio.timeout(30):
            while True:
                message = json.loads(await socket.recv())
                assert message["type"] != "error", message
                if message["type"] != "run.event":
                    continue
                event = message["event"]
                assert event["type"] != "run.failed", event
                if event["type"] == "message.completed":
                    return str(event["data"]["message"]["content"])
