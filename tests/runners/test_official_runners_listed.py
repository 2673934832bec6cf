"""After `make run`'s start-up sync, every official runner is listed as available: in `GET /api/v1/runners`
and in the admin's runner list, with its label.

The plugin runtime is started as the `make run` Procfile starts it (`python -m langbot_sdk.runtime --listen`,
with the environment `scripts/run_stack.py` gives it), and the sync is its `manage.py sync_runners`.
"""

from __future__ import annotations

import contextlib
import importlib.util
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client

from tests.conftest import PLUGINS_DIR, REPO_ROOT
from tests.factories import UserFactory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]

OFFICIAL_RUNNERS = {
    "plugin:langbot/coze-agent/default": "Coze Agent",
    "plugin:langbot/dashscope-agent/default": "Aliyun DashScope App Agent",
    "plugin:langbot/dify-agent/default": "Dify Agent",
    "plugin:langbot/harness-agent/default": "Coding Agent Harness",
    "plugin:langbot/langflow-agent/default": "Langflow Agent",
    "plugin:langbot/local-agent/default": "Local Agent",
    "plugin:langbot/n8n-agent/default": "n8n Agent",
    "plugin:langbot/qa-runner/default": "QA Runner",
    "plugin:langbot/tbox-agent/default": "Ant Tbox App Agent",
}
RUNTIME_START_TIMEOUT = 30.0


def _run_stack() -> Any:
    spec = importlib.util.spec_from_file_location("run_stack", REPO_ROOT / "scripts" / "run_stack.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _free_port_pair() -> int:
    """A port whose successor is free too: `make run` puts the runtime on the web port + 1."""
    while True:
        with socket.socket() as web, socket.socket() as runtime:
            web.bind(("127.0.0.1", 0))
            port = int(web.getsockname()[1])
            try:
                runtime.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
            return port


def _wait_listening(port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + RUNTIME_START_TIMEOUT
    while time.monotonic() < deadline:
        assert process.poll() is None, f"the plugin runtime exited while starting:\n{log.read_text()[-4000:]}"
        with socket.socket() as sock, contextlib.suppress(OSError):
            sock.connect(("127.0.0.1", port))
            return
        time.sleep(0.05)
    raise AssertionError(f"the plugin runtime did not listen on {port} within {RUNTIME_START_TIMEOUT}s")


@pytest.fixture
def make_run_runtime(settings, tmp_path: Path) -> Iterator[None]:
    """The plugin runtime as `make run` starts it (default plugin directory), the host's link pointed at it."""
    from runtimes.link import runtime_link_reset

    web_port = _free_port_pair()
    stack = _run_stack().Stack({"PATH": "/usr/bin:/bin", "PORT": str(web_port)})
    env = stack.runtime_env()
    env.pop("LANGBOT_PLUGIN_DIRS", None)  # `make run` without configuration: the default `plugins`
    log = tmp_path / "runtime.log"
    log_file = log.open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "langbot_sdk.runtime", "--listen", f"127.0.0.1:{stack.runtime_port}"],
        cwd=REPO_ROOT,
        env=env,
        stdout=log_file,
        stderr=subprocess.STDOUT,
    )
    try:
        _wait_listening(stack.runtime_port, process, log)
        settings.LANGBOT_PLUGIN_DIRS = [str(PLUGINS_DIR)]
        settings.LANGBOT_RUNTIME_URL = f"ws://127.0.0.1:{stack.runtime_port}"
        settings.LANGBOT_RUNTIME_TOKEN = stack.token
        runtime_link_reset()
        yield
    finally:
        runtime_link_reset()
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log_file.close()


def test_the_start_up_sync_lists_every_official_runner_as_available(make_run_runtime, api_client, capsys):
    call_command("sync_runners")

    printed = capsys.readouterr().out
    listed = api_client.get("/api/v1/runners").json()["items"]
    by_id = {item["runner_id"]: item for item in listed}
    assert set(OFFICIAL_RUNNERS) <= set(by_id), sorted(set(OFFICIAL_RUNNERS) - set(by_id))
    for runner_id, label in OFFICIAL_RUNNERS.items():
        assert runner_id in printed
        assert by_id[runner_id]["status"] == "available", by_id[runner_id]
        assert by_id[runner_id]["label"]["en_US"] == label
        assert not by_id[runner_id]["load_error"]


def test_the_admin_runner_list_shows_every_official_runner_available(make_run_runtime):
    call_command("sync_runners")
    client = Client()
    client.force_login(UserFactory.create(username="root", is_staff=True, is_superuser=True))

    page = client.get("/admin/bindings/runnerdescriptor/", {"status__exact": "available"})

    assert page.status_code == 200
    shown = {row.runner_id: row for row in page.context["cl"].result_list}
    assert set(OFFICIAL_RUNNERS) <= set(shown)
    html = page.content.decode()
    for runner_id, label in OFFICIAL_RUNNERS.items():
        assert runner_id in html
        assert label in html
