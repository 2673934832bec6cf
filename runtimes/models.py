"""The development tokens and sessions of runtimes that runner authors connect to a running host
(`python -m langbot_sdk dev`; `runtimes.dev_access`, `runtimes.dev_consumer`)."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _

from bindings.models import Workspace


class DevelopmentToken(models.Model):
    """A workspace's development token: lets `python -m langbot_sdk dev` connect a runtime on an author's
    machine whose runners then serve this workspace only (`runtimes.dev_access`). It is good for
    nothing else — REST, chat and the other sockets refuse it — and it expires.

    Only a sha256 of the secret is stored; the token (`lbdev_<prefix>_<secret>`) is shown once."""

    workspace = models.ForeignKey(
        Workspace, on_delete=models.CASCADE, related_name="development_tokens", verbose_name=_("workspace")
    )
    name = models.CharField(max_length=100, blank=True, verbose_name=_("name"))
    # Public lookup part, so authentication is one indexed query.
    prefix = models.CharField(max_length=16, unique=True, verbose_name=_("prefix"))
    secret_sha256 = models.CharField(max_length=64, verbose_name=_("secret sha256"))
    expires_at = models.DateTimeField(verbose_name=_("expires at"))
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("created by"),
    )
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))
    last_used_at = models.DateTimeField(null=True, blank=True, verbose_name=_("last used at"))
    revoked_at = models.DateTimeField(null=True, blank=True, verbose_name=_("revoked at"))

    class Meta:
        # Made by the runners app before the runtimes left it (migration runtimes 0001); the table kept its name.
        verbose_name = _("development token")
        verbose_name_plural = _("development tokens")
        db_table = "runners_developmenttoken"
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"lbdev_{self.prefix}_… ({self.workspace})"


class DevelopmentSession(models.Model):
    """One connection of a development runtime (`/ws/v1/dev/runtime/`): who connected, since when, which
    runners it serves (`RunnerDescriptor.source_key` is `session_id`). `ended_at` is set when it closes."""

    session_id = models.CharField(max_length=32, unique=True, verbose_name=_("session id"))
    workspace = models.ForeignKey(
        Workspace, on_delete=models.CASCADE, related_name="development_sessions", verbose_name=_("workspace")
    )
    token = models.ForeignKey(
        DevelopmentToken, on_delete=models.CASCADE, related_name="sessions", verbose_name=_("token")
    )
    peer = models.CharField(max_length=100, blank=True, verbose_name=_("peer"))
    runner_ids = models.JSONField(default=list, blank=True, verbose_name=_("runner ids"))
    connected_at = models.DateTimeField(auto_now_add=True, verbose_name=_("connected at"))
    ended_at = models.DateTimeField(null=True, blank=True, verbose_name=_("ended at"))
    close_reason = models.CharField(max_length=200, blank=True, verbose_name=_("close reason"))

    class Meta:
        verbose_name = _("development session")
        verbose_name_plural = _("development sessions")
        db_table = "runners_developmentsession"
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"development session {self.session_id[:8]} ({self.workspace})"
