"""Development tokens and sessions: the writes and reads behind `/ws/v1/dev/runtime/` and its admin.

A workspace's development token (`lbdev_<prefix>_<secret>`, only a digest stored, shown once) admits a
development runtime (`python -m langbot_sdk dev`) to that socket and to nothing else: `bindings`' API-key
lookup knows only `lbk_` keys, so REST, the chat ticket and the other sockets refuse it. A token expires
(`expires_at` is required) and can be revoked; revoking or expiring closes its live sessions.

A session is one connection. Its runners are `RunnerDescriptor` rows of source `dev`, keyed by the
session id and limited to the token's workspace (`runtimes.descriptors.runner_descriptors_sync`); when
the connection ends they are marked missing.
"""

from __future__ import annotations

import hmac
import logging
import secrets
import uuid
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.core.cache import cache
from django.utils import timezone

from bindings.models import RunnerDescriptor, Workspace
from bindings.services import api_key_secret_digest
from langbot_sdk.protocol import ListAgentRunnersResponse
from runtimes.descriptors import RunnerSyncResult, runner_descriptors_sync
from runtimes.models import DevelopmentSession, DevelopmentToken

logger = logging.getLogger(__name__)

DEV_TOKEN_PREFIX = "lbdev"
DEV_TOKEN_DEFAULT_LIFETIME = timedelta(days=7)
DEV_TOKEN_MAX_LIFETIME = timedelta(days=90)
# Channel-layer message a session's consumer acts on: close the socket with this error.
SESSION_END_MESSAGE_TYPE = "dev.session_end"
# The consumer holding a session refreshes a cache key every HEARTBEAT seconds, kept for ALIVE seconds: a web
# process that stops (daphne does not run consumers' disconnect when it is terminated) or dies leaves the
# session without one, and workers then end it instead of waiting on a socket nobody holds.
DEV_SESSION_HEARTBEAT_SECONDS = 10.0
DEV_SESSION_ALIVE_SECONDS = 30


class DevTokenRefused(Exception):  # noqa: N818 - reads as what happened to the token
    """The token does not admit a development runtime; `code` is the machine code sent to the CLI."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def dev_session_group(session_id: str) -> str:
    """The channel-layer group of the consumer holding a session's socket (workers send to it)."""
    return f"langbot.dev.{session_id}"


# --- tokens ---------------------------------------------------------------------------------------------


def dev_token_create(
    *,
    workspace: Workspace,
    name: str = "",
    expires_at: datetime | None = None,
    created_by: Any = None,
) -> tuple[DevelopmentToken, str]:
    """A new token and its plaintext, which is never stored. `expires_at` defaults to a week from now and
    may not lie in the past or beyond `DEV_TOKEN_MAX_LIFETIME`."""
    now = timezone.now()
    expires_at = expires_at or now + DEV_TOKEN_DEFAULT_LIFETIME
    if expires_at <= now:
        raise ValueError("a development token must expire in the future")
    if expires_at > now + DEV_TOKEN_MAX_LIFETIME:
        raise ValueError(f"a development token may live at most {DEV_TOKEN_MAX_LIFETIME.days} days")
    prefix = secrets.token_hex(6)
    secret = secrets.token_urlsafe(32)
    token = DevelopmentToken.objects.create(
        workspace=workspace,
        name=name,
        prefix=prefix,
        secret_sha256=api_key_secret_digest(secret),
        expires_at=expires_at,
        created_by=created_by if getattr(created_by, "pk", None) else None,
    )
    return token, f"{DEV_TOKEN_PREFIX}_{prefix}_{secret}"


def dev_token_authenticate(*, plaintext: str) -> DevelopmentToken:
    """The token `plaintext` names, if it admits a development runtime now; else `DevTokenRefused`.
    Comparison is constant-time; an unknown prefix and a wrong secret read the same."""
    parts = plaintext.split("_", 2)
    token = None
    if len(parts) == 3 and parts[0] == DEV_TOKEN_PREFIX:
        token = DevelopmentToken.objects.select_related("workspace").filter(prefix=parts[1]).first()
    if token is None or not hmac.compare_digest(token.secret_sha256, api_key_secret_digest(parts[2])):
        raise DevTokenRefused("unauthorized", "not a valid development token (create one in admin)")
    if token.revoked_at is not None:
        raise DevTokenRefused("token_revoked", "this development token was revoked")
    if token.expires_at <= timezone.now():
        raise DevTokenRefused("token_expired", "this development token has expired; create a new one in admin")
    DevelopmentToken.objects.filter(pk=token.pk).update(last_used_at=timezone.now())
    return token


def dev_tokens_revoke(*, tokens: Iterable[DevelopmentToken]) -> int:
    """Revoke `tokens` and close their live sessions. Returns how many were revoked now."""
    ids = [t.pk for t in tokens]
    count = DevelopmentToken.objects.filter(pk__in=ids, revoked_at__isnull=True).update(revoked_at=timezone.now())
    live = DevelopmentSession.objects.filter(token_id__in=ids, ended_at__isnull=True)
    for session_id in live.values_list("session_id", flat=True):
        dev_session_end_request(
            session_id=session_id, code="token_revoked", message="the development token was revoked"
        )
    return count


# --- sessions -------------------------------------------------------------------------------------------


def dev_session_open(*, token: DevelopmentToken, peer: str = "") -> DevelopmentSession:
    return DevelopmentSession.objects.create(
        session_id=uuid.uuid4().hex, workspace_id=token.workspace_id, token=token, peer=peer[:100]
    )


def dev_sessions_supersede(*, session: DevelopmentSession, runner_ids: list[str]) -> list[str]:
    """End the other live sessions of the same token that serve any of `runner_ids`; returns their ids (the
    caller tells their consumers, `dev_session_end_message`).

    It is the same author's runtime connecting again — the host restarted under the old socket without
    seeing it close, or a second `dev` of the same plugin — and the newer connection is the one the author
    is looking at. Another token's session keeps its runners (the catalog refuses the ids)."""
    superseded = _sessions_to_supersede(session=session, runner_ids=runner_ids)
    for session_id in superseded:
        dev_session_close(session_id=session_id, reason=f"superseded by session {session.session_id}")
    return superseded


def dev_session_runners_sync(*, session: DevelopmentSession, report: ListAgentRunnersResponse) -> RunnerSyncResult:
    """Make the session's development runners match the CLI's report (its workspace only)."""
    result = runner_descriptors_sync(
        report=report,
        source=RunnerDescriptor.Source.DEV,
        source_key=session.session_id,
        workspace_id=session.workspace_id,
    )
    DevelopmentSession.objects.filter(pk=session.pk).update(runner_ids=sorted(result.available + result.errored))
    return result


def _sessions_to_supersede(*, session: DevelopmentSession, runner_ids: list[str]) -> list[str]:
    holders = set(
        RunnerDescriptor.objects.filter(runner_id__in=runner_ids, source=RunnerDescriptor.Source.DEV)
        .exclude(status=RunnerDescriptor.Status.MISSING)
        .exclude(source_key=session.session_id)
        .values_list("source_key", flat=True)
    )
    if not holders:
        return []
    return list(
        DevelopmentSession.objects.filter(session_id__in=holders, token_id=session.token_id).values_list(
            "session_id", flat=True
        )
    )


def dev_session_alive_key(session_id: str) -> str:
    return f"langbot:dev:alive:{session_id}"


def dev_session_live(*, session_id: str) -> bool:
    """Whether the session is connected: not ended, and its consumer's heartbeat is fresh. One found without
    a heartbeat is ended here (its runners go missing), so runs stop being admitted to it."""
    if cache.get(dev_session_alive_key(session_id)) is None:
        if dev_session_close(session_id=session_id, reason="its web process stopped answering"):
            logger.warning("development session %s ended: no heartbeat from its web process", session_id)
            # Should its consumer live after all (the key was lost), it closes and the CLI dials again.
            dev_session_end_request(
                session_id=session_id, code="session_lost", message="the host lost this session; connect again"
            )
        return False
    return DevelopmentSession.objects.filter(session_id=session_id, ended_at__isnull=True).exists()


def dev_session_close(*, session_id: str, reason: str) -> list[str]:
    """End a session: its runners are marked missing. Returns their ids. Idempotent."""
    result = runner_descriptors_sync(
        report=ListAgentRunnersResponse(runners=[], plugins=[]),
        source=RunnerDescriptor.Source.DEV,
        source_key=session_id,
        workspace_id=None,
    )
    DevelopmentSession.objects.filter(session_id=session_id, ended_at__isnull=True).update(
        ended_at=timezone.now(), close_reason=reason[:200]
    )
    return result.missing


def dev_session_end_message(*, code: str, message: str) -> dict[str, str]:
    """The channel-layer message that makes a session's consumer close it with this error."""
    return {"type": SESSION_END_MESSAGE_TYPE, "code": code, "message": message}


def dev_session_end_request(*, session_id: str, code: str, message: str) -> None:
    """Ask the consumer holding the session (in whichever web process) to close it. From sync code only."""
    layer = get_channel_layer()
    if layer is None:
        return
    async_to_sync(layer.group_send)(dev_session_group(session_id), dev_session_end_message(code=code, message=message))


def dev_sessions_live(*, workspace_ids: Iterable[int] | None = None) -> Any:
    """The sessions connected now (all workspaces when `workspace_ids` is None)."""
    queryset = DevelopmentSession.objects.filter(ended_at__isnull=True).select_related("workspace", "token")
    if workspace_ids is not None:
        queryset = queryset.filter(workspace_id__in=list(workspace_ids))
    return queryset
