"""Tenancy, access and routing data: workspaces, members, API keys, bots, AgentBindings and the runner
catalog (`RunnerDescriptor`: what the plugin runtime offers, which bindings validate against).

Validation of bindings (runner config against the runner's schema, policies, scope) lives in
`bindings.services`; these models only hold what was validated there.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from bindings.policies import MERGE_WINDOW_DEFAULT, MERGE_WINDOW_MAX, ConcurrencyPolicy
from foundation.crypto import EncryptedJSONField


class Workspace(models.Model):
    """The unit of tenancy: every bot, binding, run and fact belongs to exactly one workspace."""

    slug = models.SlugField(max_length=64, unique=True, verbose_name=_("slug"))
    name = models.CharField(max_length=200, verbose_name=_("name"))
    members: models.ManyToManyField[AbstractBaseUser, WorkspaceMembership] = models.ManyToManyField(
        settings.AUTH_USER_MODEL, through="WorkspaceMembership", related_name="workspaces", verbose_name=_("members")
    )
    # The outbound address guard (foundation.outbound) lets this workspace's provider, bot, MCP,
    # webhook and attachment URLs reach loopback and private addresses (a self-hosted Ollama). An
    # operator's decision: set by superusers in the admin only, never through the REST API.
    allow_private_addresses = models.BooleanField(
        default=False,
        help_text=_("Its provider, bot, MCP, webhook and attachment URLs may reach private addresses."),
        verbose_name=_("allow private addresses"),
    )
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))

    class Meta:
        verbose_name = _("workspace")
        verbose_name_plural = _("workspaces")
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug


class WorkspaceMembership(models.Model):
    """A person's place in a workspace. What each role may do, and the scopes it stands for, are in
    `bindings.roles`; the roles are ranked, each one may do what the roles below it may."""

    class Role(models.TextChoices):
        # Ordered from least to most: bindings.roles.ROLE_ORDER ranks them in this order.
        VIEWER = "viewer", _("viewer")
        OPERATOR = "operator", _("operator")
        DEVELOPER = "developer", _("developer")
        ADMIN = "admin", _("admin")
        OWNER = "owner", _("owner")

    workspace = models.ForeignKey(
        Workspace, on_delete=models.CASCADE, related_name="memberships", verbose_name=_("workspace")
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships", verbose_name=_("user")
    )
    # A row made without naming a role gets the least one; bindings.services.workspace_member_add names it.
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.VIEWER, verbose_name=_("role"))

    class Meta:
        verbose_name = _("workspace membership")
        verbose_name_plural = _("workspace memberships")
        constraints = [models.UniqueConstraint(fields=["workspace", "user"], name="uniq_workspace_member")]

    def __str__(self) -> str:
        return f"{self.user} in {self.workspace}"


class ApiKey(models.Model):
    """A workspace API key. Only a sha256 of the secret is stored; the key is shown once at creation."""

    workspace = models.ForeignKey(
        Workspace, on_delete=models.CASCADE, related_name="api_keys", verbose_name=_("workspace")
    )
    name = models.CharField(max_length=100, blank=True, verbose_name=_("name"))
    # Public lookup part of the key (`lbk_<prefix>_<secret>`), so authentication is one indexed query.
    prefix = models.CharField(max_length=16, unique=True, verbose_name=_("prefix"))
    secret_sha256 = models.CharField(max_length=64, verbose_name=_("secret sha256"))
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))
    last_used_at = models.DateTimeField(null=True, blank=True, verbose_name=_("last used at"))
    revoked_at = models.DateTimeField(null=True, blank=True, verbose_name=_("revoked at"))
    # Operator scope: the key may also call host-wide operations (today `POST /runners/refresh`), which
    # act beyond its workspace. Granted by superusers only (admin, `create_api_key --operator`).
    is_operator = models.BooleanField(
        default=False,
        help_text=_("May call host-wide operations such as refreshing the runner catalog."),
        verbose_name=_("is operator"),
    )
    # The scope names (bindings.roles.SCOPES) the key may use, e.g. ["events:write", "runs:read"]. Empty: every
    # scope of its workspace, as keys had before scopes existed.
    scopes = models.JSONField(
        default=list,
        blank=True,
        help_text=_("What the key may do, e.g. events:write and runs:read. None chosen: everything in its workspace."),
        verbose_name=_("scopes"),
    )

    class Meta:
        verbose_name_plural = _("API keys")
        verbose_name = _("API key")

    def __str__(self) -> str:
        return f"lbk_{self.prefix}_… ({self.workspace})"


class Bot(models.Model):
    """A chat platform account (or the web/API entry point) that events arrive through."""

    class Platform(models.TextChoices):
        WEBUI = "webui", _("Web UI")
        API = "api", "API"
        TELEGRAM = "telegram", "Telegram"
        DISCORD = "discord", "Discord"
        SLACK = "slack", "Slack"
        LARK = "lark", _("Lark")
        DINGTALK = "dingtalk", _("DingTalk")
        WECOM = "wecom", _("WeCom")
        WECOM_AIBOT = "wecom_aibot", _("WeCom AI bot")
        WECOM_KF = "wecom_kf", _("WeChat Customer Service")
        WECHAT_OA = "wechat_oa", _("WeChat Official Account")
        LINE = "line", "LINE"
        QQ = "qq", "QQ"
        QQ_OFFICIAL = "qq_official", "QQ Official"
        MATTERMOST = "mattermost", "Mattermost"
        KOOK = "kook", "KOOK"
        MATRIX = "matrix", "Matrix"
        SATORI = "satori", "Satori"
        OTHER = "other", _("other")

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="bots", verbose_name=_("workspace"))
    bot_id = models.SlugField(max_length=64, verbose_name=_("bot id"))
    name = models.CharField(max_length=200, blank=True, verbose_name=_("name"))
    platform = models.CharField(
        max_length=16, choices=Platform.choices, default=Platform.WEBUI, verbose_name=_("platform")
    )
    # Platform tokens and signing secrets: encrypted at rest, masked wherever they are shown.
    credentials = EncryptedJSONField(default=dict, verbose_name=_("credentials"))
    allowed_origins = models.JSONField(
        default=list,
        blank=True,
        verbose_name=_("allowed origins"),
        help_text=_("Websites (scheme://host[:port]) that may embed this web bot's chat widget."),
    )
    enabled = models.BooleanField(default=True, verbose_name=_("enabled"))
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))
    updated_at = models.DateTimeField(auto_now=True, verbose_name=_("updated at"))

    class Meta:
        verbose_name = _("bot")
        verbose_name_plural = _("bots")
        ordering = ["workspace", "bot_id"]
        constraints = [models.UniqueConstraint(fields=["workspace", "bot_id"], name="uniq_bot_per_workspace")]

    def __str__(self) -> str:
        return f"{self.workspace}/{self.bot_id}"


class AgentBinding(models.Model):
    """Which runner handles which events, with what config and policies (docs/architecture.md, "The apps and their
    layers").

    `runner_config` holds the non-secret config values; the values of the runner's `secret` fields live
    encrypted in `runner_secrets`. `binding_runner_config_plain()` joins them for the orchestrator.
    """

    class ScopeType(models.TextChoices):
        GLOBAL = "global", _("global (all workspaces)")
        WORKSPACE = "workspace", _("workspace")
        BOT = "bot", _("bot")

    class Source(models.TextChoices):
        API = "api", _("Api")
        ADMIN = "admin", _("Admin")
        LEGACY_IMPORT = "legacy_import", _("legacy import")
        SEED = "seed", _("Seed")

    binding_id = models.SlugField(max_length=64, verbose_name=_("binding id"))
    name = models.CharField(max_length=200, blank=True, verbose_name=_("name"))
    # Null only for host-wide global bindings, which superusers create in admin.
    workspace = models.ForeignKey(
        Workspace, on_delete=models.CASCADE, related_name="bindings", null=True, blank=True, verbose_name=_("workspace")
    )
    scope_type = models.CharField(
        max_length=16, choices=ScopeType.choices, default=ScopeType.WORKSPACE, verbose_name=_("scope type")
    )
    # bot_id for bot scope, the workspace slug for workspace scope, empty for global scope.
    scope_id = models.CharField(max_length=64, blank=True, verbose_name=_("scope id"))
    event_types = models.JSONField(default=list, verbose_name=_("event types"))
    runner_id = models.CharField(max_length=255, db_index=True, verbose_name=_("runner id"))
    runner_config = models.JSONField(default=dict, blank=True, verbose_name=_("runner config"))
    runner_secrets = EncryptedJSONField(default=dict, verbose_name=_("runner secrets"))
    # False when the config was stored without checking it against the runner's schema (a legacy
    # import or seed while the runner was not known yet); the next edit validates it.
    config_validated = models.BooleanField(default=True, verbose_name=_("config validated"))
    resource_policy = models.JSONField(default=dict, blank=True, verbose_name=_("resource policy"))
    state_policy = models.JSONField(default=dict, blank=True, verbose_name=_("state policy"))
    delivery_policy = models.JSONField(default=dict, blank=True, verbose_name=_("delivery policy"))
    # Which events of its scope the binding answers (bindings.triggers.TriggerPolicy); empty is the default.
    trigger_policy = models.JSONField(default=dict, blank=True, verbose_name=_("trigger policy"))
    concurrency_policy = models.CharField(
        max_length=16,
        choices=[(p.value, p.value) for p in ConcurrencyPolicy],
        default=ConcurrencyPolicy.QUEUE.value,
        verbose_name=_("concurrency policy"),
    )
    # Under `merge`: the quiet time after a message before its run starts (bindings.policies).
    merge_window_seconds = models.FloatField(default=MERGE_WINDOW_DEFAULT, verbose_name=_("merge window seconds"))
    timeout_seconds = models.PositiveIntegerField(default=300, verbose_name=_("timeout seconds"))
    priority = models.IntegerField(default=0, verbose_name=_("priority"))
    enabled = models.BooleanField(default=True, verbose_name=_("enabled"))
    source = models.CharField(max_length=16, choices=Source.choices, default=Source.API, verbose_name=_("source"))
    source_detail = models.TextField(blank=True, verbose_name=_("source detail"))
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))
    updated_at = models.DateTimeField(auto_now=True, verbose_name=_("updated at"))

    class Meta:
        verbose_name = _("agent binding")
        verbose_name_plural = _("agent bindings")
        ordering = ["workspace", "binding_id"]
        indexes = [models.Index(fields=["workspace", "enabled"], name="binding_ws_enabled")]
        constraints = [
            models.UniqueConstraint(fields=["workspace", "binding_id"], name="uniq_binding_per_workspace"),
            models.UniqueConstraint(
                fields=["binding_id"], condition=Q(workspace__isnull=True), name="uniq_global_binding_id"
            ),
            models.CheckConstraint(
                condition=(Q(scope_type="global") & Q(workspace__isnull=True))
                | (~Q(scope_type="global") & Q(workspace__isnull=False)),
                name="binding_global_iff_no_workspace",
            ),
            models.CheckConstraint(
                condition=Q(timeout_seconds__gte=1) & Q(timeout_seconds__lte=3600), name="binding_timeout_range"
            ),
            models.CheckConstraint(
                condition=Q(merge_window_seconds__gt=0) & Q(merge_window_seconds__lte=MERGE_WINDOW_MAX),
                name="binding_merge_window_range",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.workspace or '(global)'}/{self.binding_id}"

    @property
    def replies(self) -> bool:
        """False for observers (`delivery_policy.enable_reply: false`)."""
        return bool((self.delivery_policy or {}).get("enable_reply", True))


class RunnerDescriptor(models.Model):
    """One AgentRunner as a runtime last reported it. Bindings refer to it by `runner_id`.

    `source` says which runtime serves it: the host's own plugin runtime, a development runtime an author
    connected with a workspace's development token (`workspace` set: only that workspace sees and binds it;
    `source_key` names the connection), or LangBot's plugin runtime. A runner id is served by one source at
    a time; another source reporting it while that one holds it is refused.
    """

    class Source(models.TextChoices):
        RUNTIME = "runtime", _("plugin runtime")
        DEV = "dev", _("development runtime")
        LANGBOT = "langbot", _("LangBot plugin runtime")

    class Status(models.TextChoices):
        AVAILABLE = "available", _("available")
        # The plugin is present but failed to load; `load_error` says why.
        ERROR = "error", _("load error")
        # No longer reported by the runtime: bindings to it fail with `runner.not_found`.
        MISSING = "missing", _("missing")

    runner_id = models.CharField(max_length=255, unique=True, verbose_name=_("runner id"))
    source = models.CharField(max_length=16, choices=Source.choices, default=Source.RUNTIME, verbose_name=_("source"))
    source_key = models.CharField(max_length=64, blank=True, verbose_name=_("source key"))
    workspace = models.ForeignKey(
        Workspace,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="development_runners",
        verbose_name=_("workspace"),
    )
    plugin_author = models.CharField(max_length=64, verbose_name=_("plugin author"))
    plugin_name = models.CharField(max_length=64, verbose_name=_("plugin name"))
    plugin_version = models.CharField(max_length=64, blank=True, verbose_name=_("plugin version"))
    runner_name = models.CharField(max_length=64, verbose_name=_("runner name"))
    label = models.JSONField(default=dict, verbose_name=_("label"))
    description = models.JSONField(default=dict, blank=True, verbose_name=_("description"))
    capabilities = models.JSONField(default=dict, verbose_name=_("capabilities"))
    permissions = models.JSONField(default=dict, verbose_name=_("permissions"))
    context_policy = models.JSONField(default=dict, verbose_name=_("context policy"))
    config_schema = models.JSONField(default=list, verbose_name=_("config schema"))
    manifest = models.JSONField(default=dict, verbose_name=_("manifest"))
    manifest_sha256 = models.CharField(max_length=64, blank=True, verbose_name=_("manifest sha256"))
    status = models.CharField(
        max_length=16, choices=Status.choices, default=Status.AVAILABLE, db_index=True, verbose_name=_("status")
    )
    load_error = models.TextField(blank=True, verbose_name=_("load error"))
    last_seen_at = models.DateTimeField(null=True, blank=True, verbose_name=_("last seen at"))
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))
    updated_at = models.DateTimeField(auto_now=True, verbose_name=_("updated at"))

    class Meta:
        verbose_name = _("runner descriptor")
        verbose_name_plural = _("runner descriptors")
        ordering = ["runner_id"]
        # The table was made when the catalog lived in the runners app; the model moved, the rows did not.
        db_table = "runners_runnerdescriptor"

    def __str__(self) -> str:
        return self.runner_id

    def visible_to(self, workspace_id: int | None) -> bool:
        """Whether a binding or run of this workspace may use the runner: another workspace's development
        runner is as unknown there as a runner never installed."""
        return self.workspace_id is None or self.workspace_id == workspace_id

    def label_text(self, locale: str = "en_US") -> str:
        return _i18n_text(self.label, locale) or self.runner_name

    def description_text(self, locale: str = "en_US") -> str:
        return _i18n_text(self.description, locale)


def _i18n_text(value: Any, locale: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and value:
        return str(value.get(locale) or value.get("en_US") or next(iter(value.values())))
    return ""
