"""The plugin runtime (`python -m langbot_sdk.runtime`): loads AgentRunner plugins and serves host
connections over stdio or WebSocket.

What belongs here: only the public names; loading is in `loader.py`, the handlers and run supervision in
`service.py`, the command line in `__main__.py`.
"""

from langbot_sdk.runtime.loader import LoadedRunner, PluginLoadError, PluginRegistry, load_plugins
from langbot_sdk.runtime.service import RUNTIME_VERSION, HostSession, PluginChannel, RuntimeService

__all__ = [
    "RUNTIME_VERSION",
    "HostSession",
    "LoadedRunner",
    "PluginChannel",
    "PluginLoadError",
    "PluginRegistry",
    "RuntimeService",
    "load_plugins",
]
