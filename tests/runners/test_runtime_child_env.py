"""The environment of the plugin runtime child a host process starts over stdio."""

from __future__ import annotations

import pytest

from runners.runtime.link import runtime_child_env


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
