"""What the LangBot-SDK tests share: LangBot's own runtime (`lbp rt`, from the virtualenv `make lbp-venv`
builds) with the test plugins installed, the host's real worker pointed at it, and a binding to the echo runner.

One runtime and one worker, on a queue of the package's own, serve the whole package: a worker lives until
the end of the session and takes runs from the queue it was started on, so any other worker on that queue
(another package's, or a second one pointed at a runtime already stopped) would fail LangBot runs.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from django.conf import settings

from tests.processes import REPO_ROOT, WebProcess, _free_port

LBP = REPO_ROOT / "var" / "langbot-plugin-venv" / "bin" / "lbp"
PLUGINS = Path(__file__).parent / "plugins"
RUNNER_ID = "plugin:lbptest/lbp-echo/echo"
INTRUDER_ID = "plugin:lbptest/lbp-intruder/steal"
API_ID = "plugin:lbptest/lbp-api/calls"


def start_lbp_rt(home: Path, env: dict[str, str] | None = None) -> tuple[subprocess.Popen[bytes], int]:
    if not LBP.exists():
        pytest.fail(f"{LBP} is missing: run `make lbp-venv` (make test builds it)")
    control, debug = _free_port(), _free_port()
    log = (home / "rt.log").open("wb")
    process = subprocess.Popen(
        [str(LBP), "rt", "--ws-control-port", str(control), "--ws-debug-port", str(debug), "--skip-deps-check"],
        cwd=home,
        env={**os.environ, **(env or {})},
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", control), timeout=0.5).close()
            break
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                pytest.fail(f"lbp rt did not start:\n{(home / 'rt.log').read_text(errors='replace')[-3000:]}")
            time.sleep(0.1)
    return process, control


def stop_process(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()


@pytest.fixture(scope="package")
def lbp_runtime(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`lbp rt` with the test plugins installed in its `data/plugins` (directories `author__name`, as LangBot
    installs plugins), listening for its host on a free control port."""
    home = tmp_path_factory.mktemp("lbp-rt")
    for name in ("lbp-echo", "lbp-intruder", "lbp-api"):
        shutil.copytree(PLUGINS / name, home / "data" / "plugins" / f"lbptest__{name}")
    process, control = start_lbp_rt(home)
    yield f"ws://127.0.0.1:{control}/control/ws"
    stop_process(process)


@pytest.fixture(scope="package")
def langbot_queue(celery_queue: str) -> Iterator[str]:
    """A Celery queue of this package's own, where this process and its web processes send runs.

    Workers live until the end of the session and take runs from the queue they were started on: a worker
    of another package (started without the LangBot runtime) would fail the LangBot runs it took.
    """
    from langbot_host.celery import app

    # Named afresh each time: with the test order shuffled the package may be set up again, and the worker
    # started the first time (pointed at a runtime stopped since) still consumes the first queue.
    queue = f"{celery_queue}-langbot-{uuid.uuid4().hex[:6]}"
    app.conf.task_default_queue = queue
    yield queue
    app.conf.task_default_queue = celery_queue
    with contextlib.suppress(redis.RedisError):
        redis.Redis.from_url(settings.CELERY_BROKER_URL).delete(queue)


@pytest.fixture(scope="package")
def langbot_worker(lbp_runtime: str, langbot_queue: str, start_worker):
    """The host's real worker (Celery, its own plugin runtime) with the LangBot runtime configured."""
    return start_worker(LANGBOT_LANGBOT_RUNTIME_URL=lbp_runtime, CELERY_TASK_DEFAULT_QUEUE=langbot_queue)


@pytest.fixture
def start_langbot_web(lbp_runtime: str, langbot_queue: str, start_web) -> Callable[[], WebProcess]:
    """Start daphne sending runs to this package's queue, with the LangBot runtime configured."""
    return lambda: start_web(LANGBOT_LANGBOT_RUNTIME_URL=lbp_runtime, CELERY_TASK_DEFAULT_QUEUE=langbot_queue)


@pytest.fixture
def langbot_binding(lbp_runtime: str, settings, langbot_worker):
    from bindings.models import RunnerDescriptor
    from runners.runtime.langbot.catalog import langbot_runners_refresh
    from tests.factories import AgentBindingFactory, WorkspaceFactory

    settings.LANGBOT_LANGBOT_RUNTIME_URL = lbp_runtime
    # The worker holds the runtime's connection and publishes what it lists; its plugins take a while to start.
    deadline = time.monotonic() + 90
    while True:
        result = langbot_runners_refresh(settle=20)
        if {RUNNER_ID, INTRUDER_ID, API_ID} <= set(result.available) or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert {RUNNER_ID, INTRUDER_ID, API_ID} <= set(result.available), result
    descriptor = RunnerDescriptor.objects.get(runner_id=RUNNER_ID)
    assert descriptor.source == RunnerDescriptor.Source.LANGBOT
    assert descriptor.permissions["history"] == ["page"]
    assert [(item["name"], item["type"]) for item in descriptor.config_schema] == [
        ("greeting", "string"),
        ("model", "model-selector"),
    ]
    binding = AgentBindingFactory.create(
        workspace=WorkspaceFactory.create(),
        runner_id=RUNNER_ID,
        runner_config={"greeting": "hi"},
        state_policy={"enable_state": True, "state_scopes": ["conversation"]},
    )
    return binding, langbot_worker


def wait_first_delta(run, timeout: float = 30) -> None:
    from runners.models import RunEvent

    deadline = time.monotonic() + timeout
    while not RunEvent.objects.filter(run=run, type="message.delta").exists():
        assert time.monotonic() < deadline, f"run {run.run_id} streamed nothing in {timeout}s"
        time.sleep(0.1)


def assistant_reply(run) -> str:
    from transcripts.models import TranscriptItem

    item = TranscriptItem.objects.filter(run_id=run.run_id, role=TranscriptItem.Role.ASSISTANT).first()
    assert item is not None, f"run {run.run_id} left no assistant reply"
    return item.content
