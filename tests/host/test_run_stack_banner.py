"""`make run`'s "is up" banner (scripts/run_stack.py, the `ready` process) is printed once /healthz answers
and once more after the worker's and beat's start-up lines, so that it is on screen when they are done."""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path
from typing import Any

import pytest

RUN_STACK = Path(__file__).resolve().parents[2] / "scripts" / "run_stack.py"


def _run_stack() -> Any:
    # Loaded from its file, as the other run_stack tests do (scripts/ is not a package).
    spec = importlib.util.spec_from_file_location("run_stack_banner", RUN_STACK)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _StoppedError(Exception):
    pass


def _announce(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> list[float]:
    module = _run_stack()
    stack = module.Stack(env)
    slept: list[float] = []
    monkeypatch.setattr(stack, "wait_healthy", lambda: True)
    monkeypatch.setattr(module.subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 0))
    monkeypatch.setattr(module.time, "sleep", slept.append)
    monkeypatch.setattr(module.signal, "signal", lambda *a: None)

    def pause() -> None:
        raise _StoppedError

    monkeypatch.setattr(module.signal, "pause", pause)
    with pytest.raises(_StoppedError):
        stack.announce()
    return slept


def test_the_banner_is_printed_again_after_the_start_up_logs(monkeypatch, capsys):
    slept = _announce(monkeypatch, {"PORT": "8123", "LANGBOT_DEMO_LOGIN": "admin / pw"})

    out = capsys.readouterr().out
    assert slept == [20.0]
    assert out.count("  admin        http://127.0.0.1:8123/admin/") == 2
    assert out.count("  demo login   admin / pw") == 2
    assert "LangBot Host is up (again, after the start-up logs)" in out


def test_the_second_banner_can_be_turned_off(monkeypatch, capsys):
    slept = _announce(monkeypatch, {"PORT": "8123", "LANGBOT_BANNER_AGAIN": "0"})

    assert slept == []
    assert capsys.readouterr().out.count("LangBot Host is up") == 1
