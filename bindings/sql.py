"""The bindings app's hand-written SQL, each statement built with its parameters (`Statement`).

Hot paths only: what runs for every event, where planning a query costs more than running it.
"""

from __future__ import annotations

import functools

from bindings.models import AgentBinding
from foundation.sql import Statement, column, table


def binding_versions(*, workspace_id: int) -> Statement:
    """`(id, xmin)` of the enabled bindings a workspace sees (its own and the global ones): the row
    versions that tell the resolver whether its cached candidates are still current. PostgreSQL only."""
    return Statement(_binding_versions_sql(), (workspace_id, AgentBinding.ScopeType.GLOBAL.value))


@functools.cache
def _binding_versions_sql() -> str:
    c = functools.partial(column, AgentBinding)
    return (
        f"SELECT {c('id')}, xmin::text FROM {table(AgentBinding)}"
        f" WHERE ({c('workspace')} = %s OR ({c('workspace')} IS NULL AND {c('scope_type')} = %s)) AND {c('enabled')}"
        f" ORDER BY {c('id')}"
    )
