"""A runtime asked to listen on a network port refuses to start without a token hosts must present."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.sdk.conftest import REPO_ROOT


def _start_listening(env: dict[str, str], *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "langbot_sdk.runtime", "--listen", "127.0.0.1:0", "--plugins-dir", "/nonexistent",
         *extra],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=30,
    )  # fmt: skip


def test_listen_without_a_token_exits_with_a_message_naming_the_token() -> None:
    env = {key: value for key, value in os.environ.items() if key != "LANGBOT_RUNTIME_TOKEN"}

    result = _start_listening(env)

    assert result.returncode == 2
    assert "--listen needs a token" in result.stderr
    assert "LANGBOT_RUNTIME_TOKEN" in result.stderr
    assert "listening on" not in result.stderr


def test_an_empty_token_counts_as_none() -> None:
    env = {**os.environ, "LANGBOT_RUNTIME_TOKEN": ""}

    result = _start_listening(env, "--token", "")

    assert result.returncode == 2
    assert "--listen needs a token" in result.stderr
