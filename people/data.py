"""Everything the host stores about a person, read as one inventory, exported as one archive, erased
(README "People", "A person's data").

What is theirs: the events their identities sent (`EventLog` by channel and actor), the transcript items of
those events and the replies of the runs those events started, those runs and their result events and
platform actions, state kept under their actor and person keys (the local agent's memory among it), the
conversation state of conversations nobody else wrote in, and the artifacts of their events and runs.

Erasure redacts the events and transcript items (text, contents, attachments, raw data and the actor's id
go; the rows stay so conversations keep their shape), empties the runs' output and errors but keeps the
runs with their status and usage (counts and costs), deletes the runs' result events, state and artifacts
(blobs once the transaction commits), then the person and their identities. Each view, export and erasure
writes a `PersonAudit` row, which outlives the person.
"""

from __future__ import annotations

import json
import logging
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from typing import IO, Any, cast

from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from artifacts.models import Artifact
from artifacts.services import artifact_blob_delete, artifact_open
from people.models import Person, PersonAudit, PersonIdentity
from runners.models import PlatformActionRequest, Run, RunEvent
from transcripts.models import EventLog, StateEntry, TranscriptItem

logger = logging.getLogger(__name__)

ERASED = "[erased]"
MEMORY_KEY_PREFIX = "memory"
ZIP_CHUNK = 64 * 1024


def _identities_q(identities: list[PersonIdentity]) -> Q:
    """Events of any of `identities`: the actor matches and so does the channel (the bot's platform, or the
    source of an event without a bot)."""
    query = Q(pk__in=[])
    for identity in identities:
        query |= Q(actor__actor_type=identity.actor_type, actor__actor_id=identity.actor_id) & (
            Q(bot__platform=identity.channel) | Q(bot__isnull=True, source=identity.channel)
        )
    return query


@dataclass
class PersonData:
    """The querysets of what is stored about one person."""

    person: Person
    identities: list[PersonIdentity]
    events: QuerySet[EventLog]
    runs: QuerySet[Run]
    items: QuerySet[TranscriptItem]
    state: QuerySet[StateEntry]
    artifacts: QuerySet[Artifact]


def person_data(person: Person) -> PersonData:
    identities = list(person.identities.order_by("pk"))
    workspace_id = person.workspace_id
    events = EventLog.objects.filter(_identities_q(identities), workspace_id=workspace_id)
    runs = Run.objects.filter(workspace_id=workspace_id, event__in=events.values("pk"))
    items = TranscriptItem.objects.filter(
        Q(event__in=events.values("pk")) | Q(run_id__in=runs.values("run_id")), workspace_id=workspace_id
    )
    conversations = set(events.exclude(conversation_id="").values_list("conversation_id", flat=True))
    # A conversation another actor also wrote in is not theirs alone: its state stays.
    shared = set(
        EventLog.objects.filter(workspace_id=workspace_id, conversation_id__in=conversations, actor__isnull=False)
        .exclude(_identities_q(identities))
        .values_list("conversation_id", flat=True)
    )
    state_q = Q(scope="person", scope_key__endswith=f":{person.person_id}")
    for identity in identities:
        state_q |= Q(scope="actor", scope_key__endswith=f":{_part(identity.actor_type)}%3A{_part(identity.actor_id)}")
    for conversation in sorted(conversations - shared):
        state_q |= Q(scope="conversation", scope_key__contains=f":{_part(conversation)}")
    state = StateEntry.objects.filter(state_q, workspace_id=workspace_id)
    artifacts = Artifact.objects.filter(
        Q(event__in=events.values("pk")) | Q(run_id__in=runs.values("run_id")), workspace_id=workspace_id
    )
    return PersonData(person, identities, events, runs, items, state, artifacts)


def _part(value: str) -> str:
    # As the scope keys escape their parts (langbot_sdk.authorization).
    return value.replace("%", "%25").replace(":", "%3A")


def person_out(person: Person) -> dict[str, Any]:
    return {
        "person_id": str(person.person_id),
        "display_name": person.display_name,
        "created_at": person.created_at.isoformat(),
        "last_seen_at": person.last_seen_at.isoformat() if person.last_seen_at else None,
        "identities": [identity_out(i) for i in person.identities.order_by("pk")],
    }


def identity_out(identity: PersonIdentity) -> dict[str, Any]:
    return {
        "channel": identity.channel,
        "actor_type": identity.actor_type,
        "actor_id": identity.actor_id,
        "actor_name": identity.actor_name,
        "linked_at": identity.created_at.isoformat(),
    }


def usage_summary(runs: QuerySet[Run]) -> dict[str, Any]:
    """Runs by status and the tokens their usage reports add up to."""
    by_status: dict[str, int] = {}
    tokens = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    for status, usage in runs.values_list("status", "usage"):
        by_status[status] = by_status.get(status, 0) + 1
        if isinstance(usage, dict):
            for name in tokens:
                value = usage.get(name)
                if isinstance(value, int) and not isinstance(value, bool):
                    tokens[name] += value
    return {"runs": sum(by_status.values()), "runs_by_status": by_status, **tokens}


def person_inventory(person: Person, *, detail: bool = False) -> dict[str, Any]:
    """What is stored about `person`: counts, and with `detail` the rows themselves (the export's JSON)."""
    data = person_data(person)
    memory = [
        {"key": e.key, "value": e.value, "updated_at": e.updated_at.isoformat()}
        for e in data.state.filter(scope="person", key__startswith=MEMORY_KEY_PREFIX).order_by("key")
    ]
    out: dict[str, Any] = {
        **person_out(person),
        "counts": {
            "events": data.events.count(),
            "transcript_items": data.items.count(),
            "state_entries": data.state.count(),
            "artifacts": data.artifacts.count(),
        },
        "memory": memory,
        "usage": usage_summary(data.runs),
    }
    if detail:
        out["events"] = [
            {
                "event_id": e.event_id,
                "event_type": e.event_type,
                "source": e.source,
                "conversation_id": e.conversation_id,
                "actor": e.actor,
                "input": e.input,
                "data": e.data,
                "created_at": e.created_at.isoformat(),
            }
            for e in data.events.order_by("pk")
        ]
        out["transcript_items"] = [
            {
                "conversation_id": i.conversation_id,
                "role": i.role,
                "content": i.content,
                "contents": i.contents,
                "artifacts": i.artifacts,
                "created_at": i.created_at.isoformat(),
            }
            for i in data.items.order_by("pk")
        ]
        out["runs"] = [
            {
                "run_id": str(r.run_id),
                "runner_id": r.runner_id,
                "status": r.status,
                "output": r.output,
                "usage": r.usage,
                "created_at": r.created_at.isoformat(),
            }
            for r in data.runs.order_by("pk")
        ]
        out["state"] = [
            {"scope": e.scope, "scope_key": e.scope_key, "key": e.key, "value": e.value}
            for e in data.state.order_by("pk")
        ]
        out["artifacts"] = [
            {**a.as_ref(), "conversation_id": a.conversation_id, "path": _artifact_path(a)}
            for a in data.artifacts.order_by("pk")
        ]
    return out


def _artifact_path(artifact: Artifact) -> str:
    return f"artifacts/{artifact.artifact_id}"


def person_audit(*, person: Person, action: str, by: str, detail: dict[str, Any] | None = None) -> None:
    PersonAudit.objects.create(
        workspace_id=person.workspace_id, person_id=person.person_id, action=action, actor=by, detail=detail or {}
    )


class _Sink:
    """The file zipfile writes to: what it wrote since the last `take`, for a streamed response. zipfile
    writes an unseekable file with data descriptors, so nothing is held back for a rewind."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []
        self._written = 0

    def write(self, data: bytes) -> int:
        self._parts.append(bytes(data))
        self._written += len(data)
        return len(data)

    def tell(self) -> int:
        return self._written

    def flush(self) -> None:
        return None

    def take(self) -> bytes:
        data = b"".join(self._parts)
        self._parts.clear()
        return data


def person_export_stream(person: Person, *, by: str) -> Iterator[bytes]:
    """The person's archive, streamed: `person.json` (the inventory with every row) and each artifact's
    blob under `artifacts/{artifact_id}`. Audited before the first byte."""
    inventory = person_inventory(person, detail=True)
    artifacts = list(person_data(person).artifacts.order_by("pk"))
    person_audit(person=person, action=PersonAudit.Action.EXPORTED, by=by, detail={"artifacts": len(artifacts)})
    return _zip_chunks(inventory, artifacts)


def _zip_chunks(inventory: dict[str, Any], artifacts: list[Artifact]) -> Iterator[bytes]:
    sink = _Sink()
    with zipfile.ZipFile(cast(IO[bytes], sink), mode="w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("person.json", json.dumps(inventory, ensure_ascii=False, indent=2, default=str))
        yield sink.take()
        for artifact in artifacts:
            with archive.open(_artifact_path(artifact), mode="w") as entry, artifact_open(artifact=artifact) as blob:
                while chunk := blob.read(ZIP_CHUNK):
                    entry.write(chunk)
                    if ready := sink.take():
                        yield ready
    yield sink.take()


def _redacted_actor(actor: Any) -> dict[str, Any]:
    kind = actor.get("actor_type") if isinstance(actor, dict) else None
    return {"actor_type": kind or "user", "actor_id": None, "actor_name": ERASED}


def person_erase(person: Person, *, by: str, action: str = PersonAudit.Action.ERASED) -> dict[str, int]:
    """Erase everything stored about `person` (see the module's docstring); returns the counts."""
    data = person_data(person)
    with transaction.atomic():
        event_ids = list(data.events.values_list("pk", flat=True))
        run_pks = list(data.runs.values_list("pk", flat=True))
        item_ids = list(data.items.values_list("pk", flat=True))
        artifact_rows = list(data.artifacts.values_list("pk", "storage_key"))
        counts = {
            "events": len(event_ids),
            "transcript_items": len(item_ids),
            "runs_kept": len(run_pks),
            "run_events": RunEvent.objects.filter(run_id__in=run_pks).delete()[0],
            "state_entries": data.state.delete()[0],
            "artifacts": len(artifact_rows),
        }
        for event in EventLog.objects.filter(pk__in=event_ids):
            EventLog.objects.filter(pk=event.pk).update(
                actor=_redacted_actor(event.actor),
                subject=None,
                input={"text": None, "contents": [], "attachments": []},
                input_summary=ERASED,
                data={},
                raw_ref=None,
                error=None,
            )
        for item in TranscriptItem.objects.filter(pk__in=item_ids):
            TranscriptItem.objects.filter(pk=item.pk).update(
                content=ERASED,
                contents=[],
                artifacts=[],
                actor=_redacted_actor(item.actor) if item.actor else None,
            )
        Run.objects.filter(pk__in=run_pks).update(output="", error=None, authorization=None, status_reason="")
        PlatformActionRequest.objects.filter(run_id__in=run_pks).update(target={}, payload={}, result={}, error=None)
        Artifact.objects.filter(pk__in=[pk for pk, _ in artifact_rows]).delete()
        transaction.on_commit(partial(_blobs_delete, [key for _, key in artifact_rows]))
        person_id = person.person_id
        workspace_id = person.workspace_id
        person.delete()
        PersonAudit.objects.create(
            workspace_id=workspace_id,
            person_id=person_id,
            action=action,
            actor=by,
            detail={**counts, "erased_at": timezone.now().isoformat()},
        )
    return counts


def _blobs_delete(keys: list[str]) -> None:
    for key in keys:
        try:
            artifact_blob_delete(storage_key=key)
        except OSError:
            # The row is gone: the retention sweep's orphan pass deletes the blob later.
            logger.warning("erased artifact blob %s could not be deleted; the orphan sweep retries", key, exc_info=True)
