"""Host handlers for the runtime → host proxy actions of runs this worker holds (DESIGN §5).

The handlers live in `runners.handlers` (one module per API family; the checks every call goes through
and the audit trail in `runners.handlers.dispatch`). This module is where the orchestrator gets them.
"""

from __future__ import annotations

from runners.handlers.dispatch import SessionLookup, proxy_handlers

__all__ = ["SessionLookup", "proxy_handlers"]
