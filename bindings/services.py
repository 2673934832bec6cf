"""Writes for workspaces and API keys."""

from __future__ import annotations

import hashlib
import secrets

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from bindings.models import ApiKey, Workspace, WorkspaceMembership

API_KEY_PREFIX = "lbk"


def api_key_secret_digest(secret: str) -> str:
    # Keys carry 256 bits of entropy, so a plain digest is enough; a slow KDF would only slow every request.
    return hashlib.sha256(secret.encode()).hexdigest()


def workspace_get_or_create(*, slug: str, name: str | None = None) -> Workspace:
    workspace, _ = Workspace.objects.get_or_create(slug=slug, defaults={"name": name or slug})
    return workspace


def workspace_member_add(
    *, workspace: Workspace, user: AbstractBaseUser, role: str = WorkspaceMembership.Role.MEMBER
) -> WorkspaceMembership:
    membership, _ = WorkspaceMembership.objects.update_or_create(
        workspace=workspace, user=user, defaults={"role": role}
    )
    return membership


@transaction.atomic
def api_key_create(*, workspace: Workspace, name: str = "") -> tuple[ApiKey, str]:
    """Create a key and return it with its plaintext, which is never stored and cannot be shown again."""
    prefix = secrets.token_hex(6)
    secret = secrets.token_urlsafe(32)
    api_key = ApiKey.objects.create(
        workspace=workspace, name=name, prefix=prefix, secret_sha256=api_key_secret_digest(secret)
    )
    return api_key, f"{API_KEY_PREFIX}_{prefix}_{secret}"
