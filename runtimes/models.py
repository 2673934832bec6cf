"""The development tokens and sessions of runtimes that runner authors connect to a running host
(`python -m langbot_sdk dev`; `runtimes.dev_access`, `runtimes.dev_consumer`)."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from bindings.models import Workspace


class DevelopmentToken(models.Model):
    """A workspace's development token: lets `python -m langbot_sdk dev` connect a runtime on an author's
    machine whose runners then serve this workspace only (`runtimes.dev_access`). It is good for
    nothing else — REST, chat and the other sockets refuse it — and it expires.

    Only a sha256 of the secret is stored; the token (`lbdev_<prefix>_<secret>`) is shown once."""

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="development_tokens")
    name = models.CharField(max_length=100, blank=True)
    # Public lookup part, so authentication is one indexed query.
    prefix = models.CharField(max_length=16, unique=True)
    secret_sha256 = models.CharField(max_length=64)
    expires_at = models.DateTimeField()
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        # Made by the runners app before the runtimes left it (migration runtimes 0001); the table kept its name.
        db_table = "runners_developmenttoken"
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"lbdev_{self.prefix}_… ({self.workspace})"


class DevelopmentSession(models.Model):
    """One connection of a development runtime (`/ws/v1/dev/runtime/`): who connected, since when, which
    runners it serves (`RunnerDescriptor.source_key` is `session_id`). `ended_at` is set when it closes."""

    session_id = models.CharField(max_length=32, unique=True)
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="development_sessions")
    token = models.ForeignKey(DevelopmentToken, on_delete=models.CASCADE, related_name="sessions")
    peer = models.CharField(max_length=100, blank=True)
    runner_ids = models.JSONField(default=list, blank=True)
    connected_at = models.DateTimeField(auto_now_add=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    close_reason = models.CharField(max_length=200, blank=True)

    class Meta:
        db_table = "runners_developmentsession"
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"development session {self.session_id[:8]} ({self.workspace})"
