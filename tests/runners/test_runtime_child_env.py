"""The environment of the plugin runtime child a host process starts over stdio."""

from __future__ import annotations

import pytest

from runtimes.link import runtime_child_env


@pytest.mark.parametrize(("freeze", "passed"), [(True, "true"), (False, "false")])
def test_the_runtime_child_gets_the_hosts_gc_setting_and_none_of_its_secrets(settings, monkeypatch, freeze, passed):
    monkeypatch.setenv("DATABASE_URL", "postgres://host:secret@db/langbot")
    monkeypatch.setenv("DJANGO_SECRET_KEY", "not-for-plugins")
    monkeypatch.setenv("PATH", "/usr/local/bin:/usr/bin")
    settings.LANGBOT_GC_FREEZE = freeze

    env = runtime_child_env(["/srv/plugins"])

    assert env["LANGBOT_GC_FREEZE"] == passed
    assert env["LANGBOT_PLUGIN_DIRS"] == "/srv/plugins"
    assert env["PATH"] == "/usr/local/bin:/usr/bin"
    assert "DATABASE_URL" not in env
    assert "DJANGO_SECRET_KEY" not in env


HOST_SECRETS = {
    "DATABASE_URL": "postgres://host:secret@db/langbot",
    "DJANGO_SECRET_KEY": "not-for-plugins",
    "LANGBOT_ENCRYPTION_KEYS": "fernet-key",
    "REDIS_URL": "redis://:secret@cache/0",
    "CELERY_BROKER_URL": "amqp://guest:secret@mq//",
    "AWS_SECRET_ACCESS_KEY": "cloud-secret",
    "LANGBOT_RUNTIME_URL": "ws://127.0.0.1:8001",
}


def _make_run_runtime_env(environ: dict[str, str]) -> dict[str, str]:
    import importlib.util

    from tests.conftest import REPO_ROOT

    spec = importlib.util.spec_from_file_location("run_stack", REPO_ROOT / "scripts" / "run_stack.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return dict(module.Stack(environ).runtime_env())


def _stdio_runtime_env(environ: dict[str, str], monkeypatch) -> dict[str, str]:
    for key, value in environ.items():
        monkeypatch.setenv(key, value)
    return runtime_child_env(["plugins"])


@pytest.mark.parametrize("launcher", ["stdio child", "make run"])
def test_every_launcher_passes_the_same_basics_and_no_host_secret(monkeypatch, launcher):
    environ = {**HOST_SECRETS, "PATH": "/usr/bin", "LC_ALL": "C.UTF-8", "HTTPS_PROXY": "http://proxy:3128"}

    env = _stdio_runtime_env(environ, monkeypatch) if launcher == "stdio child" else _make_run_runtime_env(environ)

    assert {key: env.get(key) for key in ("PATH", "LC_ALL", "HTTPS_PROXY")} == {
        "PATH": "/usr/bin", "LC_ALL": "C.UTF-8", "HTTPS_PROXY": "http://proxy:3128"
    }  # fmt: skip
    assert set(HOST_SECRETS).isdisjoint(env)
