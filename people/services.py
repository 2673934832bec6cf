"""People's writes: the person of an actor (made on first sight), one-time link codes and their redemption,
an operator's link and merge. Reads of a person's data, its export and erasure are in `people.data`.

Link codes: the user asks on one channel (`/link`), the host answers with a short code; entered on another
channel (`/link CODE`) within `LANGBOT_PEOPLE_LINK_CODE_SECONDS`, it links that channel's identity to the
same person. A code is single-use and only good in its workspace; only its SHA-256 is stored. Asking is
limited per identity and hour, and an identity that entered wrong codes `LINK_FAILURES_MAX` times waits
`LINK_FAILURE_WINDOW` before it may try again.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from people.models import LinkAttempt, LinkCode, Person, PersonAudit, PersonIdentity
from transcripts.models import StateEntry

# No 0/O, 1/I/L: a code is read on one screen and typed on another.
CODE_ALPHABET = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"
CODE_LENGTH = 8
LINK_FAILURES_MAX = 5
LINK_FAILURE_WINDOW = timedelta(minutes=15)
# `last_seen_at` is written at most this often per person: the context build must not write every turn.
SEEN_RESOLUTION = timedelta(minutes=5)


class LinkOutcome(StrEnum):
    LINKED = "linked"
    ALREADY = "already_linked"
    INVALID = "invalid"
    RATE_LIMITED = "rate_limited"


class LinkRateLimitedError(Exception):
    """The identity asked for more codes this hour than the workspace allows."""


@dataclass(frozen=True)
class ActorRef:
    channel: str
    actor_type: str
    actor_id: str
    actor_name: str = ""

    @property
    def key(self) -> str:
        return f"{self.actor_type}:{self.actor_id}"


def _code_hash(code: str) -> str:
    return hashlib.sha256(code.strip().upper().replace("-", "").encode()).hexdigest()


def identity_get_or_create(*, workspace_id: int, actor: ActorRef) -> PersonIdentity:
    """The identity of `actor`, with a person of its own the first time it is seen."""
    lookup = {
        "workspace_id": workspace_id,
        "channel": actor.channel,
        "actor_type": actor.actor_type,
        "actor_id": actor.actor_id,
    }
    identity = PersonIdentity.objects.select_related("person").filter(**lookup).first()
    if identity is not None:
        return identity
    try:
        with transaction.atomic():
            person = Person.objects.create(
                workspace_id=workspace_id, display_name=actor.actor_name[:200], last_seen_at=timezone.now()
            )
            return PersonIdentity.objects.create(person=person, actor_name=actor.actor_name[:200], **lookup)
    except IntegrityError:
        # Another process saw the same actor first: theirs is the one.
        return PersonIdentity.objects.select_related("person").get(**lookup)


def person_of_actor(
    *, workspace_id: int, channel: str, actor_type: str, actor_id: str, actor_name: str
) -> tuple[str, str]:
    """(person id, display name) of an actor, for the run context (installed in `runners.orchestrator.people`)."""
    identity = identity_get_or_create(
        workspace_id=workspace_id,
        actor=ActorRef(channel=channel, actor_type=actor_type, actor_id=actor_id, actor_name=actor_name),
    )
    person = identity.person
    now = timezone.now()
    if person.last_seen_at is None or now - person.last_seen_at > SEEN_RESOLUTION:
        Person.objects.filter(pk=person.pk).update(last_seen_at=now)
    return str(person.person_id), person.display_name


def link_code_issue(*, workspace_id: int, actor: ActorRef) -> tuple[str, LinkCode]:
    """A new code for the person of `actor` (the code in clear, once, and its row). Raises
    `LinkRateLimitedError` past `LANGBOT_PEOPLE_LINK_CODES_PER_HOUR`."""
    identity = identity_get_or_create(workspace_id=workspace_id, actor=actor)
    now = timezone.now()
    recent = LinkCode.objects.filter(identity=identity, created_at__gte=now - timedelta(hours=1)).count()
    if recent >= settings.LANGBOT_PEOPLE_LINK_CODES_PER_HOUR:
        raise LinkRateLimitedError
    # Earlier unused codes of this identity stop working: only the newest is ever valid.
    LinkCode.objects.filter(identity=identity, used_at__isnull=True).update(expires_at=now)
    while True:
        code = "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))
        try:
            with transaction.atomic():
                row = LinkCode.objects.create(
                    workspace_id=workspace_id,
                    person=identity.person,
                    identity=identity,
                    code_hash=_code_hash(code),
                    expires_at=now + timedelta(seconds=settings.LANGBOT_PEOPLE_LINK_CODE_SECONDS),
                )
            return f"{code[:4]}-{code[4:]}", row
        except IntegrityError:  # the same hash already issued in this workspace: draw again
            continue


def link_code_redeem(*, workspace_id: int, actor: ActorRef, code: str) -> tuple[LinkOutcome, Person | None]:
    """Link `actor`'s identity to the person who asked for `code`. A wrong, used, expired or other
    workspace's code is `INVALID` (and counted); too many wrong ones `RATE_LIMITED` for a while."""
    now = timezone.now()
    failures = LinkAttempt.objects.filter(
        workspace_id=workspace_id,
        channel=actor.channel,
        actor_key=actor.key,
        created_at__gte=now - LINK_FAILURE_WINDOW,
    ).count()
    if failures >= LINK_FAILURES_MAX:
        return LinkOutcome.RATE_LIMITED, None
    with transaction.atomic():
        # Marking the code used in the same statement that finds it: two redemptions cannot both win.
        updated = LinkCode.objects.filter(
            workspace_id=workspace_id, code_hash=_code_hash(code), used_at__isnull=True, expires_at__gt=now
        ).update(used_at=now)
        row = (
            LinkCode.objects.select_related("person")
            .filter(workspace_id=workspace_id, code_hash=_code_hash(code))
            .first()
            if updated
            else None
        )
        if row is None:
            LinkAttempt.objects.create(workspace_id=workspace_id, channel=actor.channel, actor_key=actor.key)
            return LinkOutcome.INVALID, None
        target = row.person
        identity = identity_get_or_create(workspace_id=workspace_id, actor=actor)
        if identity.person_id == target.pk:
            return LinkOutcome.ALREADY, target
        persons_merge(target=target, other=identity.person, by=f"link code ({actor.channel})")
        return LinkOutcome.LINKED, target


def identity_link(*, person: Person, actor: ActorRef, by: str) -> PersonIdentity:
    """An operator links an identity to `person` (moving it, with its person's data, when it had another)."""
    identity = identity_get_or_create(workspace_id=person.workspace_id, actor=actor)
    if identity.person_id != person.pk:
        previous = identity.person
        if previous.identities.count() == 1:
            persons_merge(target=person, other=previous, by=by)
        else:
            PersonIdentity.objects.filter(pk=identity.pk).update(person=person)
        PersonAudit.objects.create(
            workspace_id=person.workspace_id,
            person_id=person.person_id,
            action=PersonAudit.Action.LINKED,
            actor=by,
            detail={"identity": str(identity)},
        )
        identity.refresh_from_db()
    return identity


def persons_merge(*, target: Person, other: Person, by: str) -> Person:
    """Move `other`'s identities and person-scoped state to `target` and delete `other`. The same key in
    both keeps `target`'s value."""
    if other.pk == target.pk:
        return target
    if other.workspace_id != target.workspace_id:
        raise ValueError("persons of different workspaces cannot be merged")
    with transaction.atomic():
        PersonIdentity.objects.filter(person=other).update(person=target)
        LinkCode.objects.filter(person=other).update(person=target)
        old = str(other.person_id)
        new = str(target.person_id)
        for entry in StateEntry.objects.filter(
            workspace_id=target.workspace_id, scope="person", scope_key__endswith=f":{old}"
        ):
            moved_key = entry.scope_key[: -len(old)] + new
            taken = StateEntry.objects.filter(
                workspace_id=target.workspace_id, scope_key=moved_key, key=entry.key
            ).exists()
            if taken:
                entry.delete()
            else:
                StateEntry.objects.filter(pk=entry.pk).update(scope_key=moved_key)
        if not target.display_name and other.display_name:
            Person.objects.filter(pk=target.pk).update(display_name=other.display_name)
        seen = [t for t in (target.last_seen_at, other.last_seen_at) if t is not None]
        if seen:
            Person.objects.filter(pk=target.pk).update(last_seen_at=max(seen))
        PersonAudit.objects.create(
            workspace_id=target.workspace_id,
            person_id=target.person_id,
            action=PersonAudit.Action.MERGED,
            actor=by,
            detail={"merged": old},
        )
        other.delete()
    target.refresh_from_db()
    return target


__all__ = [
    "ActorRef",
    "LinkOutcome",
    "LinkRateLimitedError",
    "identity_get_or_create",
    "identity_link",
    "link_code_issue",
    "link_code_redeem",
    "person_of_actor",
    "persons_merge",
]
