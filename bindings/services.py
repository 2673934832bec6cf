"""Writes for workspaces, API keys, bots and bindings. Validation of bindings happens here, in one place
shared by the REST API, admin and management commands."""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from typing import Any, Protocol

from django.apps import apps
from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, models, transaction
from pydantic import ValidationError

from bindings.api_keys import API_KEY_PREFIX, api_key_secret_digest
from bindings.models import AgentBinding, ApiKey, Bot, RunnerDescriptor, Workspace, WorkspaceMembership
from bindings.origins import OriginsRefusedError, allowed_origins_normalized
from bindings.runner_config import (
    RunnerConfigError,
    runner_config_masked,
    runner_config_split_unvalidated,
    runner_config_unmask,
    runner_config_validate,
)
from bindings.selectors import workspace_private_addresses_allowed
from bindings.specs import BindingIn, BindingPatchIn, BindingScopeIn, BotIn, BotPatchIn
from foundation.api_errors import FieldsRefusedError, field_errors
from foundation.crypto import SECRET_MASK, EncryptedJSONField
from foundation.ids import free_slug
from foundation.outbound import url_checked
from foundation.ports import Port


def workspace_get_or_create(*, slug: str, name: str | None = None) -> Workspace:
    workspace, _ = Workspace.objects.get_or_create(slug=slug, defaults={"name": name or slug})
    return workspace


def workspace_member_add(
    *, workspace: Workspace, user: AbstractBaseUser, role: str = WorkspaceMembership.Role.ADMIN
) -> WorkspaceMembership:
    """Add or re-role a member, with no rule applied: for the host's own tools (seed, commands, tests).
    The default is admin, the role members had before roles (every right their model permissions gave);
    members added through the API go through `bindings.roles.member_add` and its rules."""
    membership, _ = WorkspaceMembership.objects.update_or_create(
        workspace=workspace, user=user, defaults={"role": role}
    )
    return membership


@transaction.atomic
def api_key_create(
    *, workspace: Workspace, name: str = "", is_operator: bool = False, scopes: list[str] | None = None
) -> tuple[ApiKey, str]:
    """Create a key and return it with its plaintext, which is never stored and cannot be shown again.
    `is_operator` gives it the operator scope (host-wide operations, docs/architecture.md, "The REST API");
    `scopes` narrows it to those scopes of its workspace (bindings.roles.SCOPES; none: all of them)."""
    prefix = secrets.token_hex(6)
    secret = secrets.token_urlsafe(32)
    api_key = ApiKey.objects.create(
        workspace=workspace,
        name=name,
        prefix=prefix,
        secret_sha256=api_key_secret_digest(secret),
        is_operator=is_operator,
        scopes=list(scopes or []),
    )
    return api_key, f"{API_KEY_PREFIX}_{prefix}_{secret}"


# --- bots --------------------------------------------------------------------------------------------


class BindingValidationError(FieldsRefusedError):
    """Field-level problems with a bot or binding: `{"dotted.field": message}`."""


def credentials_merge(*, given: dict[str, Any], stored: dict[str, Any]) -> dict[str, Any]:
    """Credentials as sent, with masked values replaced by the stored ones; a mask with nothing stored
    is an error."""
    merged: dict[str, Any] = {}
    for key, value in given.items():
        if value == SECRET_MASK:
            if key not in stored:
                raise BindingValidationError(
                    {f"credentials.{key}": "There is no stored secret to keep; send the value."}
                )
            merged[key] = stored[key]
        else:
            merged[key] = value
    return merged


class BotPlatformUnsupportedError(BindingValidationError):
    """A bot of a platform no adapter serves (nor the host itself): it could never take or send a message."""

    code = "platform.unsupported"


class BotCredentialSpec(Protocol):
    """One credential of a platform's bots, as the bot form shows it (`platforms.interface.CredentialField`,
    a frozen dataclass: read-only here too)."""

    @property
    def name(self) -> str: ...
    @property
    def required(self) -> bool: ...
    @property
    def secret(self) -> bool: ...
    @property
    def help(self) -> str: ...
    @property
    def link(self) -> str: ...


class BotCredentialSchemas(Protocol):
    """What the platforms app (above this one) says about a platform's bot credentials."""

    def served(self, platform: str) -> bool:
        """Whether bots of `platform` can work: an adapter serves it, or the host itself (web UI, API)."""

    def fields(self) -> Mapping[str, tuple[BotCredentialSpec, ...]]:
        """Each platform's declared credentials, in the order the form shows them."""

    def problems(self, platform: str, credentials: dict[str, Any]) -> dict[str, str]:
        """`{"credentials.<key>": message}` for what the platform's schema refuses (empty: nothing)."""

    def help_text(self) -> str:
        """The schemas, for people: each platform's credentials, which are required and where to get them."""


bot_credential_schemas: Port[BotCredentialSchemas] = Port("bot credential schemas")


def bot_credentials_check(*, platform: str, credentials: dict[str, Any]) -> None:
    """A bot's credentials against its platform's declared schema, when the platform has one and the
    platforms app installed it (`BindingValidationError` naming each key)."""
    schemas = bot_credential_schemas.installed
    if schemas is not None and not schemas.served(platform):
        raise BotPlatformUnsupportedError({"platform": f"No adapter serves {platform} bots on this host."})
    problems = schemas.problems(platform, credentials) if schemas is not None else {}
    if problems:
        raise BindingValidationError(problems)


def bot_api_base_url_check(*, workspace: Workspace, credentials: dict[str, Any], stored: dict[str, Any]) -> None:
    """A bot's `api_base_url`, when set or changed, passes the outbound address guard: public addresses
    only, unless the operator allowed private ones for the workspace or the host (`URLRefusedError`, 400
    `address.not_allowed`). Checked again by the adapter's HTTP client at every connection."""
    url = credentials.get("api_base_url")
    if url in (None, "") or url == stored.get("api_base_url"):
        return
    allow_private = workspace_private_addresses_allowed(workspace=workspace)
    url_checked(str(url), allow_private=allow_private, field="credentials.api_base_url")


@transaction.atomic
def bot_create(*, workspace: Workspace, spec: BotIn) -> Bot:
    def taken(bot_id: str) -> bool:
        return Bot.objects.filter(workspace=workspace, bot_id=bot_id).exists()

    if spec.bot_id is not None and taken(spec.bot_id):
        raise BindingValidationError({"bot_id": f"A bot {spec.bot_id!r} already exists in this workspace."})
    bot_id = spec.bot_id or free_slug(base=spec.name, taken=taken, fallback="bot")
    credentials = credentials_merge(given=spec.credentials, stored={})
    bot_credentials_check(platform=spec.platform, credentials=credentials)
    bot_api_base_url_check(workspace=workspace, credentials=credentials, stored={})
    return Bot.objects.create(
        workspace=workspace,
        bot_id=bot_id,
        name=spec.name,
        platform=spec.platform,
        credentials=credentials,
        allowed_origins=_allowed_origins(spec.allowed_origins, platform=spec.platform),
        enabled=spec.enabled,
    )


def _allowed_origins(values: list[str], *, platform: str) -> list[str]:
    """The admin form's check (`bindings.origins`), as a field error of the API."""
    try:
        return allowed_origins_normalized(values, platform=platform)
    except OriginsRefusedError as exc:
        raise BindingValidationError({"allowed_origins": " ".join(exc.messages)}) from None


@transaction.atomic
def bot_update(*, bot: Bot, patch: BotPatchIn) -> Bot:
    given = patch.model_fields_set
    nulls = {name: "May not be null." for name in given if getattr(patch, name) is None}
    if nulls:
        raise BindingValidationError(nulls)
    if "bot_id" in given and patch.bot_id != bot.bot_id:
        raise BindingValidationError({"bot_id": "A bot's id cannot be changed."})
    if patch.name is not None:
        bot.name = patch.name
    if patch.platform is not None:
        bot.platform = patch.platform
    if patch.enabled is not None:
        bot.enabled = patch.enabled
    if patch.credentials is not None:
        stored = bot.credentials or {}
        bot.credentials = credentials_merge(given=patch.credentials, stored=stored)
        bot_api_base_url_check(workspace=bot.workspace, credentials=bot.credentials, stored=stored)
    if patch.credentials is not None or patch.platform is not None:
        bot_credentials_check(platform=bot.platform, credentials=bot.credentials or {})
    if patch.allowed_origins is not None or patch.platform is not None:
        # A bot that stops being a web bot keeps no origins it could not use: it is refused, as in admin.
        origins = patch.allowed_origins if patch.allowed_origins is not None else list(bot.allowed_origins or [])
        bot.allowed_origins = _allowed_origins(origins, platform=bot.platform)
    bot.save()
    return bot


def bot_delete(*, bot: Bot) -> None:
    """Delete a bot that no binding is scoped to; bindings would otherwise silently stop matching."""
    users = list(
        AgentBinding.objects.filter(
            workspace=bot.workspace_id, scope_type=AgentBinding.ScopeType.BOT, scope_id=bot.bot_id
        ).values_list("binding_id", flat=True)
    )
    if users:
        raise BindingValidationError(
            {"bot_id": f"Bindings are scoped to this bot: {', '.join(sorted(users))}. Delete or re-scope them first."}
        )
    bot.delete()


# --- bindings ----------------------------------------------------------------------------------------


def _scope_fields(*, workspace: Workspace | None, scope: BindingScopeIn) -> dict[str, Any]:
    if scope.scope_type == "global":
        if workspace is not None:
            raise BindingValidationError(
                {
                    "scope.scope_type": "A workspace cannot create a global binding; global bindings are "
                    "host-wide and made by an administrator."
                }
            )
        if scope.scope_id:
            raise BindingValidationError({"scope.scope_id": "A global binding has no scope id."})
        return {"scope_type": scope.scope_type, "scope_id": ""}
    if workspace is None:
        raise BindingValidationError({"workspace": f"A {scope.scope_type}-scoped binding needs a workspace."})
    if scope.scope_type == "workspace":
        if scope.scope_id not in (None, "", workspace.slug):
            raise BindingValidationError(
                {"scope.scope_id": f"A workspace-scoped binding is scoped to its own workspace ({workspace.slug})."}
            )
        return {"scope_type": scope.scope_type, "scope_id": workspace.slug}
    if not scope.scope_id:
        raise BindingValidationError({"scope.scope_id": "A bot-scoped binding needs the bot_id."})
    if not Bot.objects.filter(workspace=workspace, bot_id=scope.scope_id).exists():
        raise BindingValidationError({"scope.scope_id": f"There is no bot {scope.scope_id!r} in this workspace."})
    return {"scope_type": scope.scope_type, "scope_id": scope.scope_id}


def _runner_config_fields(
    *, workspace_id: int | None, runner_id: str, config: dict[str, Any], stored_secrets: dict[str, Any]
) -> dict[str, Any]:
    descriptor = RunnerDescriptor.objects.filter(runner_id=runner_id).first()
    if (
        descriptor is None
        or not descriptor.visible_to(workspace_id)
        or descriptor.status == RunnerDescriptor.Status.MISSING
    ):
        raise BindingValidationError(
            {"runner_id": f"Runner {runner_id!r} is not available; install its plugin and refresh the runners."}
        )
    # Masks of secrets kept from a schemaless import resolve too, whatever the new schema calls them.
    config = runner_config_unmask(config=config, stored_secrets=stored_secrets)
    try:
        split = runner_config_validate(
            config_schema=descriptor.config_schema, config=config, stored_secrets=stored_secrets
        )
    except RunnerConfigError as exc:
        raise BindingValidationError(exc.fields) from None
    return {"runner_config": split.plain, "runner_secrets": split.secrets, "config_validated": True}


def binding_prepare(
    *,
    workspace: Workspace | None,
    spec: BindingIn,
    existing: AgentBinding | None = None,
    check_runner: bool = True,
) -> dict[str, Any]:
    """Validate a whole binding and return the model field values to store.

    `check_runner=False` (an update that leaves runner and config alone) skips the runner lookup, so a
    binding whose runner went missing can still be disabled or re-prioritised.
    """
    if existing is not None and spec.binding_id not in (None, existing.binding_id):
        raise BindingValidationError({"binding_id": "A binding's id cannot be changed."})

    def taken(binding_id: str) -> bool:
        others = AgentBinding.objects.filter(workspace=workspace, binding_id=binding_id)
        if existing is not None:
            others = others.exclude(pk=existing.pk)
        return others.exists()

    if existing is None and spec.binding_id is not None and taken(spec.binding_id):
        raise BindingValidationError({"binding_id": f"A binding {spec.binding_id!r} already exists here."})
    values: dict[str, Any] = {
        "binding_id": existing.binding_id
        if existing
        else (spec.binding_id or free_slug(base=spec.name, taken=taken, fallback="binding")),
        "workspace": workspace,
        "name": spec.name,
        **_scope_fields(workspace=workspace, scope=spec.scope),
        "event_types": list(spec.event_types),
        "runner_id": spec.runner_id,
        "resource_policy": spec.resource_policy.model_dump(mode="json"),
        "state_policy": spec.state_policy.model_dump(mode="json"),
        "delivery_policy": spec.delivery_policy.model_dump(mode="json"),
        "trigger_policy": spec.trigger_policy.model_dump(mode="json"),
        "concurrency_policy": spec.concurrency_policy.value,
        "merge_window_seconds": spec.merge_window_seconds,
        "timeout_seconds": spec.timeout_seconds,
        "priority": spec.priority,
        "enabled": spec.enabled,
    }
    if check_runner:
        stored = (existing.runner_secrets or {}) if existing else {}
        values.update(
            _runner_config_fields(
                workspace_id=workspace.pk if workspace is not None else None,
                runner_id=spec.runner_id,
                config=spec.runner_config,
                stored_secrets=stored,
            )
        )
    return values


def binding_save(
    *,
    values: dict[str, Any],
    instance: AgentBinding | None = None,
    source: str | None = None,
    source_detail: str | None = None,
) -> AgentBinding:
    """Write prepared values (from `binding_prepare`) to `instance` (new when None or unsaved);
    a racing duplicate id becomes a field error."""
    binding = instance if instance is not None else AgentBinding()
    for name, value in values.items():
        setattr(binding, name, value)
    if source is not None:
        binding.source = source
    if source_detail is not None:
        binding.source_detail = source_detail
    try:
        with transaction.atomic():
            binding.save()
    except IntegrityError as exc:
        raise BindingValidationError(
            {"binding_id": f"A binding {values['binding_id']!r} already exists here."}
        ) from exc
    return binding


def binding_create(
    *, workspace: Workspace | None, spec: BindingIn, source: str = AgentBinding.Source.API, source_detail: str = ""
) -> AgentBinding:
    values = binding_prepare(workspace=workspace, spec=spec)
    return binding_save(values=values, source=source, source_detail=source_detail)


def _binding_input(binding: AgentBinding) -> dict[str, Any]:
    """A stored binding as the input that would create it, secrets masked (what a client that read it
    would send). Not validated here: a row written by an older version may break a rule today."""
    return {
        "binding_id": binding.binding_id,
        "name": binding.name,
        "scope": {"scope_type": binding.scope_type, "scope_id": binding.scope_id or None},
        "event_types": binding.event_types,
        "runner_id": binding.runner_id,
        "runner_config": runner_config_masked(plain=binding.runner_config, secrets=binding.runner_secrets or {}),
        "resource_policy": binding.resource_policy,
        "state_policy": binding.state_policy,
        "delivery_policy": binding.delivery_policy,
        "trigger_policy": binding.trigger_policy,
        "concurrency_policy": binding.concurrency_policy,
        "merge_window_seconds": binding.merge_window_seconds,
        "timeout_seconds": binding.timeout_seconds,
        "priority": binding.priority,
        "enabled": binding.enabled,
    }


def binding_update(*, binding: AgentBinding, patch: BindingPatchIn) -> AgentBinding:
    """Apply a PATCH: given keys replace stored ones; runner and config are re-checked when either is given.

    The result is validated as a whole binding, so a PATCH meets the rules of a create (and a stored
    value that breaks one is named, to be repaired by the same PATCH)."""
    given = patch.model_fields_set
    nulls = {name: "May not be null." for name in given if getattr(patch, name) is None}
    if nulls:
        raise BindingValidationError(nulls)
    try:
        merged = BindingIn.model_validate({**_binding_input(binding), **patch.model_dump(mode="json", include=given)})
    except ValidationError as exc:
        raise BindingValidationError(field_errors(exc)) from None
    check_runner = bool(given & {"runner_id", "runner_config"})
    if check_runner and "runner_config" not in given:
        # A new runner checks the stored config as it is, secrets included.
        merged = merged.model_copy(update={"runner_config": binding_runner_config_plain(binding)})
    values = binding_prepare(workspace=binding.workspace, spec=merged, existing=binding, check_runner=check_runner)
    return binding_save(values=values, instance=binding)


def binding_delete(*, binding: AgentBinding) -> None:
    binding.delete()


def binding_runner_config_plain(binding: AgentBinding) -> dict[str, Any]:
    """The binding's runner config with secrets decrypted: for the orchestrator, never for display."""
    return {**(binding.runner_config or {}), **(binding.runner_secrets or {})}


@transaction.atomic
def binding_store_unvalidated(
    *,
    workspace: Workspace | None,
    spec: BindingIn,
    source: str,
    source_detail: str,
) -> AgentBinding:
    """Store a binding whose runner is not known yet (legacy import, demo seed): scope and policies are
    checked, the config is kept exactly as given and marked unvalidated; credential-looking keys are
    still encrypted."""
    values = binding_prepare(workspace=workspace, spec=spec, check_runner=False)
    split = runner_config_split_unvalidated(config=spec.runner_config)
    values.update(runner_config=split.plain, runner_secrets=split.secrets, config_validated=False)
    return binding_save(values=values, source=source, source_detail=source_detail)


def secrets_reencrypt() -> dict[str, int]:
    """Re-encrypt every stored secret with the current first key (loading decrypts with any key): the
    encrypted fields of every installed model, those of apps above this one (model providers) too."""
    labels: dict[type[models.Model], str] = {Bot: "bot credentials", AgentBinding: "binding secrets"}
    counts: dict[str, int] = {}
    for model in apps.get_models():
        field_names = [f.name for f in model._meta.concrete_fields if isinstance(f, EncryptedJSONField)]
        if not field_names:
            continue
        count = 0
        with transaction.atomic():
            queryset = model._default_manager.select_for_update().only("pk", *field_names).order_by("pk")
            for obj in queryset.iterator(chunk_size=500):
                obj.save(update_fields=field_names)
                count += 1
        counts[labels.get(model, f"{model._meta.verbose_name} secrets")] = count
    return counts


def bindings_revalidate_for_runner(*, runner_id: str) -> list[str]:
    """Check the unvalidated bindings of a runner that has just become known (after a runtime sync).

    A config that fits is stored validated (defaults filled in, secrets split by the schema); one that
    does not stays as it is and unvalidated — the next edit shows its errors. Returns the ids validated.
    """
    validated: list[str] = []
    for binding in AgentBinding.objects.filter(runner_id=runner_id, config_validated=False):
        try:
            values = _runner_config_fields(
                workspace_id=binding.workspace_id,
                runner_id=runner_id,
                config=binding_runner_config_plain(binding),
                stored_secrets={},
            )
        except BindingValidationError:
            continue
        # Conditional: an edit that landed meanwhile wins.
        updated = AgentBinding.objects.filter(
            pk=binding.pk, config_validated=False, updated_at=binding.updated_at
        ).update(runner_config=values["runner_config"], runner_secrets=values["runner_secrets"], config_validated=True)
        if updated:
            validated.append(binding.binding_id)
    return validated
