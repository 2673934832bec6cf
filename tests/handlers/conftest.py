"""A run as the worker holds it — real rows, the real context builder's session — and the real proxy
handlers bound to it, called in-process the way the runtime connection calls them."""

from __future__ import annotations

import asyncio
import hashlib
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from foundation.sql import DatabaseExecutor
from hostapi.base import RateLimiter
from hostapi.dispatch import proxy_handlers
from langbot_sdk.protocol import AgentAPIException
from runners.access.audit import AuditLog
from runners.models import Run
from runners.orchestrator.context import BuiltContext, context_build
from tests.factories import (
    AgentBindingFactory,
    ModelFactory,
    ModelProviderFactory,
    RunnerDescriptorFactory,
    WorkspaceFactory,
)
from tests.fakes.openai_server import FakeOpenAI, fake_openai
from transcripts.models import EventLog, TranscriptItem

FULL_PERMISSIONS = {
    "models": ["invoke", "stream", "rerank"],
    "tools": ["detail", "call"],
    "knowledge_bases": ["retrieve"],
    "history": ["page", "search"],
    "events": ["get", "page"],
    "artifacts": ["metadata", "read"],
    "storage": ["plugin", "workspace", "binding"],
    "platform_api": ["message.send", "message.edit", "reaction.add", "message.reaction"],
}
PULL_EVERYTHING = {
    "supports_history_pull": True,
    "supports_history_search": True,
    "supports_artifact_pull": True,
}
SCHEMA = [{"name": "model", "label": "Model", "type": "llm-model-selector"}]


@dataclass
class HostRun:
    run: Run
    built: BuiltContext
    handlers: dict[str, Any]
    audit: AuditLog
    identity: str
    active: bool = True
    deadline_at: float = field(default=0.0)

    @property
    def workspace(self) -> Any:
        return self.run.workspace

    @property
    def conversation_id(self) -> str:
        return self.run.conversation_id

    async def _call(self, action: str, data: dict[str, Any]) -> Any:
        payload = {
            "run_id": str(self.run.run_id),
            "caller_plugin_identity": self.identity,
            "run_token": self.built.session.run_token,
            **data,
        }
        try:
            result = await self.handlers[action](payload, None)
            if hasattr(result, "__anext__"):
                return [chunk async for chunk in result]
            return result
        finally:
            await self.audit.flush()

    def call(self, action: str, /, **data: Any) -> Any:
        """Call the handler as the runtime connection would (on its own event loop), then flush the audit."""
        return asyncio.run(self._call(action, data))

    def refused(self, action: str, /, **data: Any) -> AgentAPIException:
        with pytest.raises(AgentAPIException) as caught:
            self.call(action, **data)
        return caught.value


_counter = iter(range(1, 10**9))




def post_event(
    workspace: Any, conversation_id: str, text: str, *, thread_id: str = "", source: str = "api"
) -> tuple[EventLog, TranscriptItem]:
    event = EventLog.objects.create(
        workspace=workspace,
        event_id=f"evt-{next(_counter)}-{uuid.uuid4().hex[:6]}",
        event_type="message.received",
        source=source,
        conversation_id=conversation_id,
        thread_id=thread_id,
        actor={"actor_type": "user", "actor_id": "u1"},
        input={"text": text},
    )
    item = TranscriptItem.objects.create(
        workspace=workspace,
        conversation_id=conversation_id,
        thread_id=thread_id,
        role="user",
        content=text,
        event=event,
        actor=event.actor,
    )
    return event, item


@pytest.fixture
def host_run(transactional_db) -> Iterator[Any]:
    """Build a running run (`make(...)`) with a manifest asking for everything; the binding's policies
    decide what it gets. Handlers run on a real database executor."""
    executor = DatabaseExecutor(2)
    made: list[HostRun] = []

    def make(
        *,
        permissions: dict[str, Any] | None = None,
        resource_policy: dict[str, Any] | None = None,
        state_policy: dict[str, Any] | None = None,
        config: dict[str, Any] | None = None,
        conversation_id: str = "conv-a",
        thread_id: str = "",
        text: str = "hello",
        workspace: Any = None,
        source: str = "api",
        deadline_seconds: float = 60,
    ) -> HostRun:
        workspace = workspace or WorkspaceFactory.create()
        plugin = f"hostapi-{next(_counter)}"
        manifest = {
            "id": f"plugin:tester/{plugin}/default",
            "name": "default",
            "label": {"en_US": plugin},
            "config_schema": SCHEMA,
            "permissions": permissions if permissions is not None else FULL_PERMISSIONS,
            "context": PULL_EVERYTHING,
        }
        descriptor = RunnerDescriptorFactory.create(
            plugin_name=plugin,
            manifest=manifest,
            config_schema=SCHEMA,
            manifest_sha256=hashlib.sha256(json.dumps(manifest, sort_keys=True).encode()).hexdigest(),
        )
        binding = AgentBindingFactory.create(
            workspace=workspace,
            runner_id=descriptor.runner_id,
            resource_policy=resource_policy or {},
            state_policy=state_policy or {},
            runner_config=config or {},
        )
        event, _ = post_event(workspace, conversation_id, text, thread_id=thread_id, source=source)
        run = Run.objects.create(
            workspace=workspace,
            event=event,
            binding=binding,
            binding_key=binding.binding_id,
            runner_id=descriptor.runner_id,
            conversation_id=conversation_id,
            thread_id=thread_id,
            status=Run.Status.RUNNING,
        )
        deadline = timezone.now() + timedelta(seconds=deadline_seconds)
        built = context_build(run=run, event=event, binding=binding, descriptor=descriptor, deadline_at=deadline)
        Run.objects.filter(pk=run.pk).update(authorization=built.session.authorization(), deadline_at=deadline)
        run.refresh_from_db()
        holder = HostRun(
            run=run,
            built=built,
            handlers={},
            audit=AuditLog(executor),
            identity=built.session.plugin_identity,
            deadline_at=deadline.timestamp(),
        )

        def lookup(run_token: str) -> tuple[Any, float] | None:
            if run_token != built.session.run_token or not holder.active:
                return None
            return built.session, holder.deadline_at

        holder.handlers = proxy_handlers(
            sessions=lookup, db=executor, audit=holder.audit, rate_limiter=RateLimiter(rate=0, burst=0)
        )
        made.append(holder)
        return holder

    yield make
    executor.shutdown()


# --- model calls against a local OpenAI-compatible provider ------------------------------------------

PROVIDER_KEY = "sk-secret-key-123456"


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    """A local server speaking the OpenAI-compatible wire format (and `/rerank`)."""
    with fake_openai() as server:
        yield server


@pytest.fixture
def model_run(host_run: Any, fake: FakeOpenAI) -> Any:
    """Make a run whose config selects model `m1` (allowed by the binding), a model of a provider that is the
    fake server (or `base_url`), keyed with `PROVIDER_KEY`."""

    def make(
        *,
        kind: str = "llm",
        name: str = "gpt-fake",
        headers: dict[str, str] | None = None,
        base_url: str | None = None,
        **run: Any,
    ) -> Any:
        workspace = WorkspaceFactory.create()
        provider = ModelProviderFactory.create(
            workspace=workspace, base_url=base_url or fake.base_url, api_key=PROVIDER_KEY, headers=headers or {},
            max_retries=0,
        )  # fmt: skip
        ModelFactory.create(workspace=workspace, provider=provider, model_id="m1", name=name, kind=kind)
        return host_run(
            workspace=workspace, config={"model": "m1"}, resource_policy={"allowed_model_ids": ["m1"]}, **run
        )

    return make
