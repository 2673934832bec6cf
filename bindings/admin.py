"""Admin for workspaces, API keys, bots and bindings.

A new key's plaintext is shown once, in the success message. Superusers see everything and alone may
create host-wide global bindings; other staff see and edit only the bots and bindings of workspaces they
belong to. Secrets (bot credentials, secret runner config fields) are only ever shown masked.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from bindings.admin_scope import (
    ScopedListFilters,
    WorkspaceRoleAdmin,
    WorkspaceScopedAdmin,
    is_superuser,
    member_workspaces,
)
from bindings.forms import (
    CONFIG_FIELD_PREFIX,
    CREDENTIAL_FIELD_PREFIX,
    AgentBindingAdminForm,
    BotAdminForm,
    binding_admin_form,
    bot_admin_form,
    policy_field_names,
)
from bindings.models import AgentBinding, ApiKey, Bot, Workspace, WorkspaceMembership
from bindings.roles import SCOPES, member_change_refusal, request_role_in
from bindings.selectors import workspaces_of_member
from bindings.services import api_key_create, binding_save
from foundation.readable import json_list_text


class WorkspaceMembershipFormSet(
    forms.BaseInlineFormSet[WorkspaceMembership, Workspace, forms.ModelForm[WorkspaceMembership]]
):
    """The membership rules of bindings.roles (only owners grant or take the owner role; the last owner stays)
    applied to the rows the form adds, changes and deletes."""

    request: HttpRequest

    def clean(self) -> None:
        super().clean()
        workspace = self.instance
        if is_superuser(self.request) or workspace.pk is None:
            return
        actor = request_role_in(self.request, workspace.pk)
        owners_after = 0
        for form in self.forms:
            if not getattr(form, "cleaned_data", None):
                continue
            before = form.initial.get("role") if form.instance.pk else None
            after = None if form.cleaned_data.get("DELETE") else form.cleaned_data.get("role")
            owners_after += after == WorkspaceMembership.Role.OWNER
            if before == after:
                continue
            refusal = member_change_refusal(actor_role=actor, workspace=workspace, before=before, after=after)
            # The last owner is counted over the whole form below: another row may be made owner in it.
            if refusal is not None and refusal.code != "members.last_owner":
                raise forms.ValidationError(refusal.message)
        if owners_after == 0 and workspace.memberships.filter(role=WorkspaceMembership.Role.OWNER).exists():
            raise forms.ValidationError(gettext("The workspace's last owner stays: make another member owner first."))


class WorkspaceMembershipInline(admin.TabularInline[WorkspaceMembership, Workspace]):
    model = WorkspaceMembership
    formset = WorkspaceMembershipFormSet
    extra = 0
    autocomplete_fields = ["user"]

    def get_formset(self, request: HttpRequest, obj: Any = None, **kwargs: Any) -> Any:
        formset = super().get_formset(request, obj, **kwargs)
        formset.request = request  # type: ignore[attr-defined]
        return formset


@admin.register(Workspace)
class WorkspaceAdmin(WorkspaceRoleAdmin[Workspace]):
    list_display = ["slug", "name", "allow_private_addresses", "created_at"]
    list_filter = ["allow_private_addresses"]
    search_fields = ["slug", "name"]
    prepopulated_fields = {"slug": ["name"]}
    inlines = [WorkspaceMembershipInline]
    actions = ["create_api_key"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        # Private addresses reach the host's own network, beyond the workspace: only a superuser opens them.
        readonly = list(super().get_readonly_fields(request, obj))
        return readonly if is_superuser(request) else [*readonly, "allow_private_addresses"]

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        # A new tenant is the host's to make: its first owner is added with it, by a superuser.
        return is_superuser(request) and super().has_add_permission(request, *args)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Workspace]:
        # Other staff see (and so may mint keys for) only the workspaces they belong to.
        queryset = super().get_queryset(request)
        return queryset if is_superuser(request) else queryset.filter(pk__in=member_workspaces(request))

    @admin.action(description=_("Create an API key (shown once)"))
    def create_api_key(self, request: HttpRequest, queryset: QuerySet[Workspace]) -> None:
        for workspace in queryset:
            _key, plaintext = api_key_create(workspace=workspace, name=f"admin:{request.user}")
            messages.success(
                request,
                gettext("New API key for %(workspace)s (copy it now, it is not stored): %(key)s")
                % {"workspace": workspace.slug, "key": plaintext},
            )


class ApiKeyAdminForm(forms.ModelForm[ApiKey]):
    # Ticked boxes rather than a JSON list: a key's scopes are names from bindings.roles.SCOPES only.
    scopes = forms.MultipleChoiceField(
        choices=[(name, f"{name} — {scope.description}") for name, scope in SCOPES.items()],
        widget=forms.CheckboxSelectMultiple,
        required=False,
        label=_("scopes"),
        help_text=_("What the key may do. None ticked: everything in its workspace."),
    )

    class Meta:
        model = ApiKey
        fields = ["workspace", "name", "scopes", "is_operator", "revoked_at"]


@admin.register(ApiKey)
class ApiKeyAdmin(WorkspaceScopedAdmin[ApiKey]):
    form = ApiKeyAdminForm
    list_display = [
        "prefix", "workspace", "name", "scopes_display", "is_operator", "created_at", "last_used_at", "revoked_at"
    ]  # fmt: skip
    list_filter = ["is_operator", "workspace"]
    readonly_fields = ["prefix", "created_at", "last_used_at"]
    fields = ["workspace", "name", "prefix", "scopes", "is_operator", "created_at", "last_used_at", "revoked_at"]
    actions = ["revoke"]

    @admin.display(description=_("scopes"))
    def scopes_display(self, obj: ApiKey) -> str:
        return ", ".join(obj.scopes) if obj.scopes else gettext("all of its workspace")

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        if obj is None:
            # Adding mints a key: what is stored besides (prefix, digest, times) is not the operator's to type.
            return ["workspace", "name", "scopes", "is_operator"]
        return self.fields

    def save_model(self, request: HttpRequest, obj: ApiKey, form: Any, change: bool) -> None:
        if change:
            super().save_model(request, obj, form, change)
            return
        # Minted by the service, which alone sees the plaintext: shown here once, never stored.
        key, plaintext = api_key_create(
            workspace=obj.workspace,
            name=obj.name,
            is_operator=obj.is_operator and is_superuser(request),
            scopes=list(obj.scopes or []),
        )
        obj.pk, obj.prefix, obj.created_at = key.pk, key.prefix, key.created_at
        messages.warning(
            request,
            gettext("New API key for %(workspace)s — copy it now, it is not stored and not shown again: %(key)s")
            % {"workspace": key.workspace.slug, "key": plaintext},
        )

    @admin.action(description=_("Revoke selected keys"))
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiKey]) -> None:
        count = queryset.filter(revoked_at__isnull=True).update(revoked_at=timezone.now())
        messages.success(request, gettext("Revoked %(count)d key(s).") % {"count": count})

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        readonly = [*self.readonly_fields, "workspace"] if obj else list(self.readonly_fields)
        # The operator scope reaches beyond the key's workspace: only a superuser grants or removes it.
        return readonly if is_superuser(request) else [*readonly, "is_operator"]


def view_only_fieldsets(
    model_admin: admin.ModelAdmin[Any], request: HttpRequest, obj: Any, fieldsets: list[tuple[Any, dict[str, Any]]]
) -> list[tuple[Any, dict[str, Any]]]:
    """`fieldsets` as a read-only page can show them: a role that may view an object and not change it sees
    its model fields and the admin's display methods; the editing form's own fields (credentials, runner
    config, policy controls) have nothing to show outside that form."""
    if obj is None or model_admin.has_change_permission(request, obj):
        return fieldsets
    model_fields = {field.name for field in obj._meta.get_fields()}
    shown = []
    for title, options in fieldsets:
        names = [n for n in options["fields"] if callable(n) or n in model_fields or hasattr(model_admin, n)]
        if names:
            shown.append((title, {**options, "fields": names}))
    return shown


@admin.register(Bot)
class BotAdmin(WorkspaceScopedAdmin[Bot]):
    """Bots: one field per credential of the selected platform, and a "Test connection" button on a
    saved bot's page (its check is the platforms app's, set as `connection_check` when the admin is
    assembled; without it the button is not shown)."""

    form = BotAdminForm
    change_form_template = "admin/bindings/bot/change_form.html"
    list_display = ["bot_id", "workspace", "name", "platform", "enabled", "updated_at"]
    list_filter = ["platform", "enabled", "workspace"]
    search_fields = ["bot_id", "name"]
    connection_check: ClassVar[Callable[[Bot], tuple[bool, str]] | None] = None
    # A web bot's chat widget embed snippet for its page (the debug chat app's, set when the admin is assembled:
    # webchat.widget_admin); without it no snippet is shown.
    widget_snippet: ClassVar[Callable[[HttpRequest, Bot], str] | None] = None

    def get_form(self, request: HttpRequest, obj: Bot | None = None, change: bool = False, **kwargs: Any) -> Any:
        # A read-only page (a role that may view, not change) shows the object's fields and edits nothing: the
        # editing form, whose set-up needs the fields Django leaves out of such a page, has no part in it.
        view_only = obj is not None and not self.has_change_permission(request, obj)
        kwargs["form"] = forms.ModelForm if view_only else bot_admin_form()
        return super().get_form(request, obj, change=change, **kwargs)

    def get_fieldsets(self, request: HttpRequest, obj: Bot | None = None) -> Any:
        form = bot_admin_form()
        credential_fields = [name for name in form.base_fields if name.startswith(CREDENTIAL_FIELD_PREFIX)]
        readonly = [name for name in self.get_readonly_fields(request, obj) if name not in ("workspace",)]
        fieldsets = [
            (None, {"fields": ["workspace", "bot_id", "name", "platform", "enabled", *readonly]}),
            (_("Credentials"), {"fields": [*credential_fields, "credentials_input"]}),
            (_("Website chat widget"), {"fields": ["allowed_origins"]}),
        ]
        return view_only_fieldsets(self, request, obj, fieldsets)

    def get_urls(self) -> list[URLPattern]:
        view = self.admin_site.admin_view(self.connection_test_view)
        return [
            path("<path:object_id>/test-connection/", view, name="bindings_bot_test_connection"),
            *super().get_urls(),
        ]

    def connection_test_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """POST: call the platform's identity endpoint with the stored credentials and say what it answered."""
        bot = self.get_object(request, object_id)
        if bot is None or not self.has_change_permission(request, bot):
            raise PermissionDenied
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        check = type(self).connection_check
        if check is None:
            self.message_user(request, gettext("Nothing on this host can test a bot's connection."), messages.ERROR)
        else:
            worked, line = check(bot)
            self.message_user(request, line, messages.SUCCESS if worked else messages.ERROR)
        return HttpResponseRedirect(reverse(f"{self.admin_site.name}:bindings_bot_change", args=[bot.pk]))

    def render_change_form(self, request: HttpRequest, context: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        context["connection_testable"] = type(self).connection_check is not None
        snippet, bot = type(self).widget_snippet, context.get("original")
        context["widget_snippet"] = (
            snippet(request, bot) if snippet and isinstance(bot, Bot) and bot.platform == Bot.Platform.WEBUI else ""
        )
        return super().render_change_form(request, context, *args, **kwargs)

    def save_model(self, request: HttpRequest, obj: Bot, form: Any, change: bool) -> None:
        obj.credentials = form.credentials
        super().save_model(request, obj, form, change)


@admin.register(AgentBinding)
class AgentBindingAdmin(ScopedListFilters[AgentBinding]):
    list_display = [
        "binding_id",
        "workspace",
        "scope_display",
        "event_types_display",
        "runner_id",
        "priority",
        "replies_display",
        "enabled",
        "config_validated",
    ]
    list_filter = ["enabled", "scope_type", "config_validated", "workspace", "runner_id"]
    search_fields = ["binding_id", "name", "runner_id", "scope_id"]
    readonly_fields = ["config_validated", "source", "source_detail", "created_at", "updated_at"]

    @admin.display(description=_("event types"))
    def event_types_display(self, obj: AgentBinding) -> str:
        return json_list_text(obj.event_types)  # a list of names, not its JSON text

    @admin.display(description=_("scope"))
    def scope_display(self, obj: AgentBinding) -> str:
        return f"{obj.scope_type}:{obj.scope_id}" if obj.scope_id else obj.scope_type

    @admin.display(description=_("replies"), boolean=True)
    def replies_display(self, obj: AgentBinding) -> bool:
        return obj.replies

    def get_queryset(self, request: HttpRequest) -> QuerySet[AgentBinding]:
        queryset = super().get_queryset(request).select_related("workspace")
        if getattr(request.user, "is_superuser", False):
            return queryset
        # Staff see global bindings (they apply to every workspace) but cannot change them.
        member_of = workspaces_of_member(user_id=request.user.pk)
        return queryset.filter(Q(workspace__in=member_of) | Q(workspace__isnull=True))

    def has_change_permission(self, request: HttpRequest, obj: AgentBinding | None = None) -> bool:
        if obj is not None and obj.workspace_id is None and not getattr(request.user, "is_superuser", False):
            return False
        return super().has_change_permission(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: AgentBinding | None = None) -> bool:
        if obj is not None and obj.workspace_id is None and not getattr(request.user, "is_superuser", False):
            return False
        return super().has_delete_permission(request, obj)

    def _runner_id(self, request: HttpRequest, obj: AgentBinding | None) -> str | None:
        if request.method == "POST":
            return request.POST.get("runner_id") or None
        return request.GET.get("runner_id") or (obj.runner_id if obj else None)

    def get_form(
        self, request: HttpRequest, obj: AgentBinding | None = None, change: bool = False, **kwargs: Any
    ) -> type[forms.ModelForm[AgentBinding]]:
        if obj is not None and not self.has_change_permission(request, obj):
            # Read-only (see BotAdmin.get_form): the editing form's set-up needs fields such a page leaves out.
            kwargs["form"] = forms.ModelForm
            return super().get_form(request, obj, change=change, **kwargs)
        runner_id = self._runner_id(request, obj)
        form = binding_admin_form(runner_id=runner_id, user=request.user, instance=obj)
        if runner_id and request.method != "POST":
            form.base_fields["runner_id"].initial = runner_id
        kwargs["form"] = form
        return super().get_form(request, obj, change=change, **kwargs)

    def get_fieldsets(self, request: HttpRequest, obj: AgentBinding | None = None) -> Any:
        # One section per question an operator asks (when does it run, what runs, with what, remembering
        # what, answering how), the rarely needed ones collapsed; titles are lazy translations.
        form_class = binding_admin_form(runner_id=self._runner_id(request, obj), user=request.user, instance=obj)
        form = form_class(instance=obj) if request.method != "POST" else form_class(request.POST, instance=obj)
        kept = form.langbot_kept_field_names()
        config_fields = [
            CONFIG_FIELD_PREFIX + item.name
            for item in form.config_items
            if CONFIG_FIELD_PREFIX + item.name in form.fields and CONFIG_FIELD_PREFIX + item.name not in kept
        ]
        resource = dict.fromkeys(policy_field_names("resource_policy"))
        context_keys = ["history_conversations", "history_same_actor", "storage_areas"]
        context_fields = [f"resource_policy__{key}" for key in context_keys]
        resource_fields = [name for name in resource if name not in context_fields and name != "resource_policy__other"]
        others = [
            f"{policy}__other" for policy in ("resource_policy", "state_policy", "delivery_policy", "trigger_policy")
        ]
        state_fields = [name for name in policy_field_names("state_policy") if name not in others]
        delivery_fields = [name for name in policy_field_names("delivery_policy") if name not in others]
        trigger_fields = [name for name in policy_field_names("trigger_policy") if name not in others]
        fieldsets: list[tuple[Any, dict[str, Any]]] = [
            (None, {"fields": ["binding_id", "name", "workspace", "enabled"]}),
            (
                _("Trigger"),
                {
                    "fields": ["scope_type", "scope_id", "event_types", "priority", *trigger_fields],
                    "description": _("Which events of which bots start this binding's runner."),
                },
            ),
            (_("Runner"), {"fields": ["runner_id", *config_fields]}),
            (
                _("Resources"),
                {
                    "fields": resource_fields,
                    "description": _("The models, tools and knowledge bases runs may use."),
                },
            ),
            (_("Context & state"), {"fields": [*context_fields, *state_fields]}),
            (
                _("Delivery & concurrency"),
                {"fields": [*delivery_fields, "concurrency_policy", "merge_window_seconds", "timeout_seconds"]},
            ),
            (_("Advanced"), {"fields": others, "classes": ["collapse"]}),
        ]
        if kept:
            fieldsets.append((_("Imported from LangBot"), {"fields": kept, "classes": ["collapse"]}))
        if obj is not None:
            fieldsets.append((_("Record"), {"fields": self.readonly_fields, "classes": ["collapse"]}))
        return view_only_fieldsets(self, request, obj, fieldsets)

    def save_model(self, request: HttpRequest, obj: AgentBinding, form: Any, change: bool) -> None:
        assert isinstance(form, AgentBindingAdminForm)
        binding_save(
            values=form.prepared,
            instance=obj,
            source=None if change else AgentBinding.Source.ADMIN,
            source_detail=None if change else f"admin:{request.user}",
        )
