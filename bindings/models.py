"""Tenancy and access: workspaces, their members and their API keys.

Bots and AgentBindings join this module when the bindings issue lands.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models


class Workspace(models.Model):
    """The unit of tenancy: every bot, binding, run and fact belongs to exactly one workspace."""

    slug = models.SlugField(max_length=64, unique=True)
    name = models.CharField(max_length=200)
    members = models.ManyToManyField(settings.AUTH_USER_MODEL, through="WorkspaceMembership", related_name="workspaces")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug


class WorkspaceMembership(models.Model):
    class Role(models.TextChoices):
        OWNER = "owner"
        MEMBER = "member"

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.MEMBER)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["workspace", "user"], name="uniq_workspace_member")]

    def __str__(self) -> str:
        return f"{self.user} in {self.workspace}"


class ApiKey(models.Model):
    """A workspace API key. Only a sha256 of the secret is stored; the key is shown once at creation."""

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=100, blank=True)
    # Public lookup part of the key (`lbk_<prefix>_<secret>`), so authentication is one indexed query.
    prefix = models.CharField(max_length=16, unique=True)
    secret_sha256 = models.CharField(max_length=64)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "API key"

    def __str__(self) -> str:
        return f"lbk_{self.prefix}_… ({self.workspace})"
