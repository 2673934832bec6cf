"""Where a run's runner runs: one `RunnerHost` per runtime source (`RunnerDescriptor.Source`).

A worker's orchestrator asks `RunnerHosts.get(source, key)` for the host of a run's runner and streams
`run_agent` through it, or sends `cancel_run` and `run_input` (steered input). Every host answers the
runner's proxy calls with the same handlers (the orchestrator's `proxy_handlers`), so authorization and audit
do not depend on where the runner lives. Sources:

- `runtime`: the host's own plugin runtime over the process's `RuntimeLink` (stdio child or `--listen`).
- `dev`: a development runtime an author connected to the host (`runtimes.dev`).
- `langbot`: LangBot's own plugin runtime (`runtimes.langbot`).

A source other than `runtime` is imported when a run first needs it, so a host that never uses it never
loads its code.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Protocol

from django.utils.module_loading import import_string

from langbot_sdk.protocol import Action, AgentInput, RunInput, RunInputResult
from langbot_sdk.wire import Handler
from runtimes.link import RuntimeLink

SOURCE_RUNTIME = "runtime"

# source -> dotted path of a `RunnerHostFactory`.
FACTORY_PATHS: dict[str, str] = {
    "dev": "runtimes.dev.dev_runner_host",
    "langbot": "runtimes.langbot.langbot_runner_host",
}


class RunnerHost(Protocol):
    def run_agent(self, request: dict[str, Any]) -> AbstractAsyncContextManager[AsyncIterator[dict[str, Any]]]:
        """The runner's results for one `run_agent` request, as Protocol v1 result dicts, in order."""
        ...

    async def cancel_run(self, run_id: str, reason: str, *, timeout: float) -> None:
        """Ask the runner to stop; raises `AgentAPIException` when the request could not be delivered."""
        ...

    async def run_input(self, run_id: str, event_id: str, given: dict[str, Any], *, timeout: float) -> bool:
        """Hand `given` (an `AgentInput`) to the running run; True once its runner has taken it, False when
        it never will. A host whose runners cannot take input while running does not have this method."""
        ...


# (source key, the proxy handlers runs of this worker are answered with) -> the host of that source.
RunnerHostFactory = Callable[[str, Mapping[str, Handler]], RunnerHost]


class LinkRunnerHost:
    """The host's own plugin runtime."""

    def __init__(self, link: RuntimeLink) -> None:
        self.link = link

    @asynccontextmanager
    async def run_agent(self, request: dict[str, Any]) -> AsyncIterator[AsyncIterator[dict[str, Any]]]:
        connection = await self.link.connection()
        async with connection.stream(Action.RUN_AGENT, request) as stream:
            yield stream

    async def cancel_run(self, run_id: str, reason: str, *, timeout: float) -> None:
        await self.link.call(Action.CANCEL_RUN, {"run_id": run_id, "reason": reason}, timeout=timeout)

    async def run_input(self, run_id: str, event_id: str, given: dict[str, Any], *, timeout: float) -> bool:
        return await run_input_call(self.link.call, run_id, event_id, given, timeout=timeout)


async def run_input_call(
    call: Callable[..., Awaitable[dict[str, Any]]], run_id: str, event_id: str, given: dict[str, Any], *, timeout: float
) -> bool:
    """Send `run_input` with `call` (a connection's or the link's) and read the runtime's answer."""
    data = RunInput(run_id=run_id, event_id=event_id, input=AgentInput.model_validate(given)).model_dump(mode="json")
    answer = await call(Action.RUN_INPUT, data, timeout=timeout)
    return RunInputResult.model_validate(answer).accepted


class RunnerHosts:
    """One worker's hosts, made on first use and kept for the process."""

    def __init__(self, link: RuntimeLink, handlers: Mapping[str, Handler]) -> None:
        self.default = LinkRunnerHost(link)
        self.handlers = dict(handlers)
        self._hosts: dict[tuple[str, str], RunnerHost] = {}

    def get(self, source: str, key: str = "") -> RunnerHost:
        if not source or source == SOURCE_RUNTIME:
            return self.default
        host = self._hosts.get((source, key))
        if host is None:
            factory: RunnerHostFactory = import_string(FACTORY_PATHS[source])
            host = self._hosts[(source, key)] = factory(key, self.handlers)
        return host

    async def aclose(self) -> None:
        """Close every host that holds connections of its own."""
        closers = [getattr(host, "aclose", None) for host in self._hosts.values()]
        await asyncio.gather(*(closer() for closer in closers if closer is not None), return_exceptions=True)
        self._hosts.clear()
