"""What a plugin runtime process may inherit from the process that starts it: the one allowlist.

The runtime executes third-party runner code, so it gets the process basics (paths, locale, proxies,
certificates) and its own settings, and nothing that would let a plugin reach the host's database, decrypt
host secrets or use the host's broker and cloud credentials (docs/security.md, "Runner code"). Every launcher
uses this list: the host's stdio child (`runtimes.link`) and `make run`'s WebSocket runtime
(`scripts/run_stack.py`).
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["RUNTIME_ENV_NAMES", "RUNTIME_ENV_PREFIXES", "runtime_environment"]

RUNTIME_ENV_NAMES = frozenset(
    {
        "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TMPDIR", "TERM",
        "VIRTUAL_ENV", "PYTHONPATH", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE", "PYTHONIOENCODING",
        "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE",
        "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy",
        "LANGBOT_PLUGIN_DIRS", "LANGBOT_GC_FREEZE", "LANGBOT_RUNTIME_TOKEN", "LANGBOT_RUNTIME_ISOLATION",
        "LANGBOT_PLUGIN_MEMORY_MB",
    }
)  # fmt: skip
"""Variables passed on by name."""
RUNTIME_ENV_PREFIXES = ("LC_",)
"""Variables passed on by prefix (the locale categories)."""


def runtime_environment(source: Mapping[str, str], **overrides: str) -> dict[str, str]:
    """The allowed part of `source`, then `overrides` (which are the launcher's to choose)."""
    env = {
        key: value for key, value in source.items() if key in RUNTIME_ENV_NAMES or key.startswith(RUNTIME_ENV_PREFIXES)
    }
    env.update(overrides)
    return env
