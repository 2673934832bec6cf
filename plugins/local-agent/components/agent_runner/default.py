"""The local-agent's only runner; the code lives in the plugin's `langbot_local_agent` package (see the
plugin README). The plugin runtime puts the plugin directory on `sys.path` while it imports this file, so
the package is imported here, at import time, with everything it needs."""

from __future__ import annotations

from langbot_local_agent.runner import LocalAgentRunner

__all__ = ["LocalAgentRunner"]
