"""What `make run` prints to a newcomer about encryption keys: the advice once, with what to do, and not
again from each of its processes."""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path
from typing import Any

from foundation import crypto

RUN_STACK = Path(__file__).resolve().parents[2] / "scripts" / "run_stack.py"


def _stack(env: dict[str, str]) -> Any:
    # Loaded from its file, as the other run_stack tests do (scripts/ is not a package).
    spec = importlib.util.spec_from_file_location("run_stack", RUN_STACK)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.Stack(env)


def test_the_missing_key_warning_says_what_to_do(settings, caplog):
    settings.LANGBOT_ENCRYPTION_KEYS = []
    settings.LANGBOT_ENCRYPTION_KEYS_NOTED = False
    settings.SECRET_KEY = "start-up-output-test-key-1"

    with caplog.at_level(logging.WARNING, logger="foundation.crypto"):
        crypto.encrypt_text("hello")

    assert "Fernet.generate_key()" in caplog.text
    assert "set LANGBOT_ENCRYPTION_KEYS" in caplog.text


def test_a_process_started_by_make_run_does_not_repeat_it(settings, caplog):
    settings.LANGBOT_ENCRYPTION_KEYS = []
    settings.LANGBOT_ENCRYPTION_KEYS_NOTED = True
    settings.SECRET_KEY = "start-up-output-test-key-2"

    with caplog.at_level(logging.WARNING, logger="foundation.crypto"):
        token = crypto.encrypt_text("hello")

    assert crypto.decrypt_text(token) == "hello"
    assert caplog.text == ""


def test_make_run_notes_it_once_and_tells_its_processes_only_when_no_key_is_set(capsys):
    stack = _stack({"NO_COLOR": "1"})

    stack.note_encryption_keys()

    assert capsys.readouterr().out.count("LANGBOT_ENCRYPTION_KEYS is not set") == 1
    assert stack.host_env()["LANGBOT_ENCRYPTION_KEYS_NOTED"] == "1"
    with_key = _stack({"NO_COLOR": "1", "LANGBOT_ENCRYPTION_KEYS": "a-key"})
    with_key.note_encryption_keys()
    assert capsys.readouterr().out == ""
    assert "LANGBOT_ENCRYPTION_KEYS_NOTED" not in with_key.host_env()
