"""What one run may touch: its scope (workspace, bot, conversation, thread, binding, runner, actor,
subject) and the isolated state keys derived from it (docs/state-storage-artifacts.md, "State").

`RunScope` lives in `langbot_sdk.authorization`, shared with the SDK's fake host so both derive the same
state keys; it is re-exported here for the host's modules.
"""

from __future__ import annotations

from langbot_sdk.authorization import SCOPE_KEY_MAX_LENGTH, RunScope

__all__ = ["SCOPE_KEY_MAX_LENGTH", "RunScope"]
