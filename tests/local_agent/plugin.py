"""The local-agent plugin's package, imported for tests the way the plugin runtime imports it: with the
plugin directory on `sys.path` (plugin directories have hyphens, so they are not packages of this repo,
and mypy does not follow them — the modules are typed `Any` here)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

PLUGIN_DIR = Path(__file__).resolve().parents[2] / "plugins" / "local-agent"
RUNNER_ID = "plugin:langbot/local-agent/default"

if str(PLUGIN_DIR) not in sys.path:
    sys.path.insert(0, str(PLUGIN_DIR))

config: Any = importlib.import_module("langbot_local_agent.config")
budget: Any = importlib.import_module("langbot_local_agent.budget")
context: Any = importlib.import_module("langbot_local_agent.context")
history: Any = importlib.import_module("langbot_local_agent.history")
tools: Any = importlib.import_module("langbot_local_agent.tools")
runner: Any = importlib.import_module("langbot_local_agent.runner")
