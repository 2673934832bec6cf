"""langbot_sdk: everything a runner author needs, importable without Django or the host.

`AgentRunner` to subclass, `AgentRunAPIProxy` (from `self.run_api(ctx)`) to reach host capabilities, and
every Protocol v1 model (`AgentRunContext`, `AgentRunResult`, `AgentAPIError`, `HistoryPage`, ...).
The wire framing and the plugin runtime live in `langbot_sdk.wire` and `langbot_sdk.runtime`; the fake host
for unit tests in `langbot_sdk.testing`; the checks both hosts apply to proxy calls in
`langbot_sdk.authorization`; `python -m langbot_sdk new` scaffolds a plugin. The guide is `docs/`.
"""

from langbot_sdk.protocol import *  # noqa: F403 — the protocol models are the SDK's public surface
from langbot_sdk.protocol import __all__ as _protocol_names
from langbot_sdk.proxy import AgentRunAPIProxy
from langbot_sdk.runner import AgentRunner

__all__ = [*_protocol_names, "AgentRunAPIProxy", "AgentRunner"]
