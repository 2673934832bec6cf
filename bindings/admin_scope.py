"""The admin base of objects that belong to one workspace (bots, model providers, models, MCP servers,
knowledge bases): who sees and may pick what, and which ids are fixed once made.

`WorkspaceRoleAdmin` is where the admin asks the workspace roles (`bindings.roles`): every view, add, change
and delete permission and every action of a workspace's rows needs the member's role in that row's workspace
to reach the scope `bindings.roles.ADMIN_SCOPES` names for the model — on top of the model permissions
Django gives the staff account, never instead of them. Custom admin pages ask `bindings.roles.request_may`
and `workspaces_allowing` the same way.
"""

from __future__ import annotations

from typing import Any, ClassVar, TypeVar

from django.contrib import admin
from django.db.models import Model, Q, QuerySet
from django.http import HttpRequest, HttpResponse

from bindings.models import Workspace
from bindings.roles import admin_scopes, request_may, workspace_ids_allowing, workspaces_allowing
from bindings.selectors import workspaces_of_member

_M = TypeVar("_M", bound=Model)


def is_superuser(request: HttpRequest) -> bool:
    return bool(getattr(request.user, "is_superuser", False))


def member_workspaces(request: HttpRequest) -> QuerySet[Workspace]:
    return workspaces_of_member(user_id=request.user.pk)


def object_workspace_id(obj: Model) -> int | None:
    """The workspace a row belongs to (a workspace: itself); None for host-wide rows (global bindings)."""
    if isinstance(obj, Workspace):
        return obj.pk
    workspace_id = getattr(obj, "workspace_id", None)
    return int(workspace_id) if workspace_id is not None else None


class WorkspaceRoleAdmin(admin.ModelAdmin[_M]):
    """The workspace roles in the admin (module docstring). A host-wide row (no workspace) needs the scope in
    any of the member's workspaces; what such rows allow beyond that is the subclass's to narrow."""

    def _scopes(self) -> tuple[str, str, str]:
        return admin_scopes(self.model._meta.label)

    def _role_allows(self, request: HttpRequest, scope: str, obj: Any) -> bool:
        return request_may(request, scope, object_workspace_id(obj) if obj is not None else None)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return super().has_view_permission(request, obj) and self._role_allows(request, self._scopes()[0], obj)

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        # Inlines' parents pass the parent object: adding a row to it needs the role in the parent's workspace.
        parent = args[0] if args else None
        return super().has_add_permission(request, *args) and self._role_allows(request, self._scopes()[1], parent)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return super().has_change_permission(request, obj) and self._role_allows(request, self._scopes()[1], obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return super().has_delete_permission(request, obj) and self._role_allows(request, self._scopes()[2], obj)

    def get_queryset(self, request: HttpRequest) -> QuerySet[_M]:
        queryset = super().get_queryset(request)
        if is_superuser(request):
            return queryset
        return role_filter(queryset, workspace_ids_allowing(request, self._scopes()[0]))

    def get_actions(self, request: HttpRequest) -> Any:
        actions = super().get_actions(request)
        return actions if request_may(request, self._scopes()[1]) else type(actions)()

    def response_action(self, request: HttpRequest, queryset: QuerySet[_M]) -> HttpResponse | None:
        # An action changes what it is run on: only the selected rows of workspaces where the role may.
        if not is_superuser(request):
            queryset = role_filter(queryset, workspace_ids_allowing(request, self._scopes()[1]))
        return super().response_action(request, queryset)


def role_filter(queryset: QuerySet[_M], workspace_ids: list[int]) -> QuerySet[_M]:
    """The rows of those workspaces, plus host-wide rows where the model has them (global bindings)."""
    model = queryset.model
    if model is Workspace:
        return queryset.filter(pk__in=workspace_ids)
    field = model._meta.get_field("workspace_id" if not _has_field(model, "workspace") else "workspace")
    condition = Q(workspace_id__in=workspace_ids)
    if getattr(field, "null", False):
        condition |= Q(workspace_id__isnull=True)
    return queryset.filter(condition)


def _has_field(model: type[Model], name: str) -> bool:
    return any(f.name == name for f in model._meta.get_fields())


class ScopedListFilters(WorkspaceRoleAdmin[_M]):
    """List filters on a relation (`workspace`, `binding`, ...) offer, to other staff than superusers, only
    the related objects the rows they may see point at: the plain filter lists every row of the related
    table, other workspaces' names included."""

    def get_list_filter(self, request: HttpRequest) -> Any:
        filters = list(super().get_list_filter(request))
        if is_superuser(request):
            return filters
        return [self._related_only(f) for f in filters]

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        """A person who may pick one workspace only finds it picked on an add form."""
        formfield: Any = super().formfield_for_foreignkey(db_field, request, **kwargs)
        queryset = getattr(formfield, "queryset", None)
        if db_field.name == "workspace" and queryset is not None and formfield.initial is None:
            only = list(queryset.values_list("pk", flat=True)[:2])
            if len(only) == 1:
                formfield.initial = only[0]
        return formfield

    def _related_only(self, list_filter: Any) -> Any:
        if not isinstance(list_filter, str) or "__" in list_filter:
            return list_filter
        if not self.model._meta.get_field(list_filter).is_relation:
            return list_filter
        return (list_filter, admin.RelatedOnlyFieldListFilter)


class WorkspaceScopedAdmin(ScopedListFilters[_M]):
    """Superusers see and pick everything. Other staff see the objects of the workspaces they belong to,
    and may pick only those workspaces — and, for the foreign keys named in `scoped_foreign_keys` (field →
    the lookup from the related model to its workspace), only objects of those workspaces.

    `fixed_fields` are the ids other objects and runners refer to: read-only once the object exists, and
    prepopulated only while adding."""

    fixed_fields: ClassVar[tuple[str, ...]] = ()
    scoped_foreign_keys: ClassVar[dict[str, str]] = {}

    def get_queryset(self, request: HttpRequest) -> QuerySet[_M]:
        queryset = super().get_queryset(request).select_related("workspace")
        if is_superuser(request):
            return queryset
        return queryset.filter(workspace__in=member_workspaces(request))

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if not is_superuser(request):
            if db_field.name == "workspace":
                # Only workspaces where the member's role may make and change these rows.
                kwargs["queryset"] = workspaces_allowing(request, self._scopes()[1])
            elif db_field.name in self.scoped_foreign_keys:
                lookup = f"{self.scoped_foreign_keys[db_field.name]}__in"
                kwargs["queryset"] = db_field.related_model._default_manager.filter(
                    **{lookup: member_workspaces(request)}
                )
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def get_readonly_fields(self, request: HttpRequest, obj: _M | None = None) -> list[str]:
        readonly = list(super().get_readonly_fields(request, obj))
        return [*readonly, *self.fixed_fields] if obj else readonly

    def get_prepopulated_fields(self, request: HttpRequest, obj: _M | None = None) -> dict[str, Any]:
        return {} if obj else dict(super().get_prepopulated_fields(request, obj))
