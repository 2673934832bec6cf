"""People end to end: `/link` codes join two channels into one person, the run context names the person and
the `person` state scope follows them across channels; a person's data is listed, exported as one archive
and erased — erased text gone from every text column of the database and from stored blobs — each step
audited; the retention sweep erases people silent for longer than their workspace keeps person data."""

from __future__ import annotations

import asyncio
import io
import json
import re
import uuid
import zipfile
from datetime import timedelta
from typing import Any

import pytest
from django.apps import apps
from django.db import models
from django.db.models.functions import Cast
from django.utils import timezone

from artifacts.models import Artifact
from artifacts.services import artifact_create_from_bytes
from artifacts.storage import artifact_storage
from foundation.sql import DatabaseExecutor
from gateway.envelope import EventEnvelopeIn
from gateway.services import event_ingest
from hostapi.base import RateLimiter
from hostapi.dispatch import proxy_handlers
from people.models import LinkCode, Person, PersonAudit, PersonIdentity
from people.services import (
    ActorRef,
    LinkOutcome,
    LinkRateLimitedError,
    link_code_issue,
    link_code_redeem,
    person_of_actor,
)
from runners.access.audit import AuditLog
from runners.lifecycle.retention import retention_sweep
from runners.models import Run, RunEvent
from runners.orchestrator.context import context_build
from tests.factories import AgentBindingFactory, BotFactory, RunnerDescriptorFactory, WorkspaceFactory
from transcripts.models import EventLog, RetentionPurge, StateEntry, TranscriptItem

SECRET = "PINEAPPLE-ZEBRA-4417"
CODE = re.compile(r"\b([A-Z0-9]{4}-[A-Z0-9]{4})\b")


def say(
    workspace: Any, text: str, *, actor_id: str, source: str = "api", bot: Any = None, conversation: str = ""
) -> EventLog:
    envelope = EventEnvelopeIn.model_validate(
        {
            "source": source,
            "bot_id": bot.bot_id if bot else None,
            "conversation_id": conversation or f"{source}-{actor_id}",
            "actor": {"actor_type": "user", "actor_id": actor_id, "actor_name": actor_id.title()},
            "input": {"text": text},
        }
    )
    return event_ingest(workspace=workspace, envelope=envelope, bot=bot).event


def host_answer(event: EventLog) -> str:
    item = TranscriptItem.objects.filter(
        workspace=event.workspace, conversation_id=event.conversation_id, role="assistant"
    ).latest("pk")
    return item.content


def link(workspace: Any, *, asker: dict[str, Any], enterer: dict[str, Any]) -> str:
    answer = host_answer(say(workspace, "/link", **asker))
    code = CODE.search(answer)
    assert code is not None, answer
    return host_answer(say(workspace, f"/link {code.group(1)}", **enterer))


def descriptor_make() -> Any:
    """A runner whose manifest asks for nothing beyond what every runner gets (state comes from the binding)."""
    plugin = f"people-{uuid.uuid4().hex[:8]}"
    manifest = {
        "id": f"plugin:tester/{plugin}/default",
        "name": "default",
        "label": {"en_US": plugin},
        "permissions": {},
    }
    return RunnerDescriptorFactory.create(plugin_name=plugin, manifest=manifest)


def run_of(event: EventLog, binding: Any, descriptor: Any) -> Any:
    run = Run.objects.create(
        workspace=event.workspace,
        event=event,
        bot=event.bot,
        binding=binding,
        binding_key=binding.binding_id,
        runner_id=descriptor.runner_id,
        conversation_id=event.conversation_id,
        status=Run.Status.RUNNING,
    )
    deadline = timezone.now() + timedelta(seconds=60)
    built = context_build(run=run, event=event, binding=binding, descriptor=descriptor, deadline_at=deadline)
    Run.objects.filter(pk=run.pk).update(authorization=built.session.authorization(), deadline_at=deadline)
    return run, built


def proxy(built: Any, executor: DatabaseExecutor) -> Any:
    def lookup(token: str) -> Any:
        return (built.session, timezone.now().timestamp() + 60) if token == built.session.run_token else None

    audit = AuditLog(executor)
    handlers: dict[str, Any] = proxy_handlers(
        sessions=lookup, db=executor, audit=audit, rate_limiter=RateLimiter(rate=0, burst=0)
    )

    def call(action: str, **data: Any) -> Any:
        async def go() -> Any:
            payload = {
                "run_id": built.session.run_id,
                "caller_plugin_identity": built.session.plugin_identity,
                "run_token": built.session.run_token,
                **data,
            }
            try:
                return await handlers[action](payload, None)
            finally:
                await audit.flush()

        return asyncio.run(go())

    return call


@pytest.mark.django_db(transaction=True)
def test_a_link_code_joins_two_channels_and_person_state_follows_the_person():
    workspace = WorkspaceFactory.create()
    telegram = BotFactory.create(workspace=workspace, platform="telegram")
    answer = link(
        workspace,
        asker={"actor_id": "tg-42", "source": "platform", "bot": telegram},
        enterer={"actor_id": "ann@example.com", "source": "webui"},
    )
    assert answer.startswith("Linked")
    identities = PersonIdentity.objects.filter(workspace=workspace)
    assert {(i.channel, i.actor_id) for i in identities} == {("telegram", "tg-42"), ("webui", "ann@example.com")}
    assert len({i.person_id for i in identities}) == 1
    assert not Run.objects.filter(workspace=workspace).exists()  # the host answered; no binding ran

    descriptor = descriptor_make()
    binding = AgentBindingFactory.create(
        workspace=workspace,
        runner_id=descriptor.runner_id,
        state_policy={"enable_state": True, "state_scopes": ["person"]},
    )
    person = Person.objects.get(workspace=workspace)
    on_telegram = say(workspace, "hi", actor_id="tg-42", source="platform", bot=telegram)
    on_web = say(workspace, "hello", actor_id="ann@example.com", source="webui")
    _, built_tg = run_of(on_telegram, binding, descriptor)
    _, built_web = run_of(on_web, binding, descriptor)
    for built in (built_tg, built_web):
        assert built.context.actor.metadata["person_id"] == str(person.person_id)
        assert built.context.actor.metadata["person_name"] == "Tg-42"
    executor = DatabaseExecutor(2)
    try:
        proxy(built_tg, executor)("state_set", scope="person", key="likes", value={"tea": True})
        got = proxy(built_web, executor)("state_get", scope="person", key="likes")
    finally:
        executor.shutdown()
    assert got == {"found": True, "value": {"tea": True}}
    assert built_web.state_keys["person"] == built_tg.state_keys["person"]


@pytest.mark.django_db
def test_link_codes_are_single_use_short_lived_workspace_scoped_and_rate_limited(settings):
    settings.LANGBOT_PEOPLE_LINK_CODES_PER_HOUR = 2
    workspace, other = WorkspaceFactory.create(), WorkspaceFactory.create()
    ann = ActorRef("telegram", "user", "tg-1")
    web = ActorRef("webui", "user", "ann")
    code, _ = link_code_issue(workspace_id=workspace.pk, actor=ann)

    assert link_code_redeem(workspace_id=other.pk, actor=web, code=code)[0] is LinkOutcome.INVALID
    assert link_code_redeem(workspace_id=workspace.pk, actor=web, code=code.lower())[0] is LinkOutcome.LINKED
    assert link_code_redeem(workspace_id=workspace.pk, actor=ActorRef("slack", "user", "U1"), code=code)[0] is (
        LinkOutcome.INVALID
    )

    late, row = link_code_issue(workspace_id=workspace.pk, actor=ann)
    LinkCode.objects.filter(pk=row.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert link_code_redeem(workspace_id=workspace.pk, actor=ActorRef("slack", "user", "U1"), code=late)[0] is (
        LinkOutcome.INVALID
    )
    with pytest.raises(LinkRateLimitedError):
        link_code_issue(workspace_id=workspace.pk, actor=ann)

    guesser = ActorRef("slack", "user", "U2")
    for _ in range(5):
        link_code_redeem(workspace_id=workspace.pk, actor=guesser, code="AAAA-AAAA")
    fresh, _ = link_code_issue(workspace_id=workspace.pk, actor=ActorRef("line", "user", "L1"))
    assert link_code_redeem(workspace_id=workspace.pk, actor=guesser, code=fresh)[0] is LinkOutcome.RATE_LIMITED


def person_with_data(workspace: Any) -> tuple[Person, Artifact, Run]:
    telegram = BotFactory.create(workspace=workspace, platform="telegram")
    link(
        workspace,
        asker={"actor_id": "tg-7", "source": "platform", "bot": telegram},
        enterer={"actor_id": "bo@example.com", "source": "webui"},
    )
    person = Person.objects.get(workspace=workspace)
    event = say(workspace, f"my code word is {SECRET}", actor_id="tg-7", source="platform", bot=telegram)
    descriptor = descriptor_make()
    binding = AgentBindingFactory.create(workspace=workspace, runner_id=descriptor.runner_id)
    run, _ = run_of(event, binding, descriptor)
    Run.objects.filter(pk=run.pk).update(
        status=Run.Status.COMPLETED,
        output=f"I will keep {SECRET} safe",
        usage={"prompt_tokens": 11, "completion_tokens": 5, "total_tokens": 16},
    )
    RunEvent.objects.create(run=run, seq=1, type="message.completed", data={"text": f"I will keep {SECRET} safe"})
    TranscriptItem.objects.create(
        workspace=workspace,
        conversation_id=event.conversation_id,
        role="assistant",
        content=f"I will keep {SECRET} safe",
        run_id=run.run_id,
    )
    StateEntry.objects.create(
        workspace=workspace,
        scope="person",
        scope_key=f"person:{descriptor.runner_id.replace(':', '%3A')}:{binding.binding_id}:{person.person_id}",
        key="memory",
        value={"facts": [{"fact": f"code word {SECRET}", "turn": str(run.run_id)}]},
    )
    artifact = artifact_create_from_bytes(
        workspace=workspace,
        data=f"a note with {SECRET}".encode(),
        name="note.txt",
        mime_type="text/plain",
        conversation_id=event.conversation_id,
        source=Artifact.Source.INPUT,
        event=event,
    )
    return person, artifact, run


def text_columns_holding(value: str) -> list[str]:
    """Every text, char and JSON column of every model that still holds `value` (JSON cast to text)."""
    found = []
    for model in apps.get_models():
        for field in model._meta.concrete_fields:
            if isinstance(field, models.CharField | models.TextField):
                hit = model._default_manager.filter(**{f"{field.name}__contains": value}).exists()
            elif isinstance(field, models.JSONField):
                hit = (
                    model._default_manager.annotate(_as_text=Cast(field.name, models.TextField()))
                    .filter(_as_text__contains=value)
                    .exists()
                )
            else:
                continue
            if hit:
                found.append(f"{model._meta.label}.{field.name}")
    return found


@pytest.mark.django_db(transaction=True)
def test_a_persons_data_is_listed_exported_and_erased_everywhere(api_client_for):
    workspace = WorkspaceFactory.create()
    client = api_client_for(workspace)
    person, artifact, run = person_with_data(workspace)
    assert text_columns_holding(SECRET)

    listed = client.get("/api/v1/persons").json()["items"]
    assert [p["person_id"] for p in listed] == [str(person.person_id)]
    detail = client.get(f"/api/v1/persons/{person.person_id}").json()
    assert detail["counts"]["artifacts"] == 1
    assert detail["counts"]["events"] >= 1
    assert detail["memory"][0]["value"]["facts"][0]["fact"] == f"code word {SECRET}"
    assert detail["usage"]["runs"] == 1
    assert detail["usage"]["total_tokens"] == 16

    exported = client.get(f"/api/v1/persons/{person.person_id}/export")
    assert exported.status_code == 200
    assert exported["Content-Type"] == "application/zip"
    archive = zipfile.ZipFile(io.BytesIO(b"".join(exported.streaming_content)))
    body = json.loads(archive.read("person.json"))
    assert SECRET in json.dumps(body["events"])
    assert SECRET in json.dumps(body["state"])
    assert archive.read(f"artifacts/{artifact.artifact_id}") == f"a note with {SECRET}".encode()

    storage = artifact_storage()
    assert storage.exists(artifact.storage_key)
    erased = client.post(f"/api/v1/persons/{person.person_id}/erase")
    assert erased.status_code == 200, erased.content
    assert erased.json()["erased"]["runs_kept"] == 1

    assert text_columns_holding(SECRET) == []
    assert not storage.exists(artifact.storage_key)
    assert not Artifact.objects.filter(pk=artifact.pk).exists()
    kept = Run.objects.get(pk=run.pk)
    assert kept.status == Run.Status.COMPLETED
    assert kept.usage == {"prompt_tokens": 11, "completion_tokens": 5, "total_tokens": 16}
    assert not Person.objects.filter(workspace=workspace).exists()
    assert not PersonIdentity.objects.filter(workspace=workspace).exists()
    actions = list(PersonAudit.objects.filter(person_id=person.person_id).values_list("action", flat=True))
    assert {"viewed", "exported", "erased"} <= set(actions)
    assert client.get(f"/api/v1/persons/{person.person_id}").status_code == 404


@pytest.mark.django_db
def test_another_workspaces_person_is_not_found(api_client_for):
    mine, theirs = WorkspaceFactory.create(), WorkspaceFactory.create()
    person_id, _ = person_of_actor(
        workspace_id=theirs.pk, channel="api", actor_type="user", actor_id="x", actor_name=""
    )
    client = api_client_for(mine)
    for method, path in (
        ("get", f"/api/v1/persons/{person_id}"),
        ("get", f"/api/v1/persons/{person_id}/export"),
        ("post", f"/api/v1/persons/{person_id}/erase"),
        ("get", "/api/v1/persons/not-a-uuid"),
    ):
        response = getattr(client, method)(path)
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "not_found"
    assert client.get("/api/v1/persons").json()["items"] == []
    assert Person.objects.filter(person_id=uuid.UUID(person_id)).exists()


@pytest.mark.django_db(transaction=True)
def test_the_retention_sweep_erases_people_silent_longer_than_their_workspace_keeps_them(settings):
    keeping, forgetting = WorkspaceFactory.create(), WorkspaceFactory.create()
    settings.LANGBOT_RETENTION_WORKSPACES = {forgetting.slug: {"person_days": 30}}
    old = timezone.now() - timedelta(days=40)
    silent, _, _ = person_with_data(forgetting)
    Person.objects.filter(pk=silent.pk).update(last_seen_at=old)
    recent_id, _ = person_of_actor(
        workspace_id=forgetting.pk, channel="api", actor_type="user", actor_id="new", actor_name=""
    )
    kept_id, _ = person_of_actor(workspace_id=keeping.pk, channel="api", actor_type="user", actor_id="o", actor_name="")
    Person.objects.filter(person_id=kept_id).update(last_seen_at=old)

    retention_sweep()

    assert set(Person.objects.values_list("person_id", flat=True)) == {uuid.UUID(recent_id), uuid.UUID(kept_id)}
    assert text_columns_holding(SECRET) == []
    purge = RetentionPurge.objects.get(workspace=forgetting, kind="person_data")
    assert purge.count == 1
    assert PersonAudit.objects.filter(person_id=silent.person_id, action="retention").exists()


@pytest.mark.django_db
def test_merging_moves_identities_and_person_state_to_the_kept_person():
    from people.services import persons_merge

    workspace = WorkspaceFactory.create()
    a_id, _ = person_of_actor(
        workspace_id=workspace.pk, channel="telegram", actor_type="user", actor_id="1", actor_name=""
    )
    b_id, _ = person_of_actor(
        workspace_id=workspace.pk, channel="slack", actor_type="user", actor_id="U1", actor_name=""
    )
    a, b = Person.objects.get(person_id=a_id), Person.objects.get(person_id=b_id)
    StateEntry.objects.create(
        workspace=workspace, scope="person", scope_key=f"person:r:b:{b_id}", key="memory", value=1
    )
    persons_merge(target=a, other=b, by="test")
    assert set(a.identities.values_list("channel", flat=True)) == {"telegram", "slack"}
    assert StateEntry.objects.get(workspace=workspace, key="memory").scope_key == f"person:r:b:{a_id}"
    assert not Person.objects.filter(pk=b.pk).exists()
