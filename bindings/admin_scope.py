"""The admin base of objects that belong to one workspace (bots, model providers, models, MCP servers,
knowledge bases): who sees and may pick what, and which ids are fixed once made."""

from __future__ import annotations

from typing import Any, ClassVar, TypeVar

from django.contrib import admin
from django.db.models import Model, QuerySet
from django.http import HttpRequest

from bindings.models import Workspace
from bindings.selectors import workspaces_of_member

_M = TypeVar("_M", bound=Model)


def is_superuser(request: HttpRequest) -> bool:
    return bool(getattr(request.user, "is_superuser", False))


def member_workspaces(request: HttpRequest) -> QuerySet[Workspace]:
    return workspaces_of_member(user_id=request.user.pk)


class ScopedListFilters(admin.ModelAdmin[_M]):
    """List filters on a relation (`workspace`, `binding`, ...) offer, to other staff than superusers, only
    the related objects the rows they may see point at: the plain filter lists every row of the related
    table, other workspaces' names included."""

    def get_list_filter(self, request: HttpRequest) -> Any:
        filters = list(super().get_list_filter(request))
        if is_superuser(request):
            return filters
        return [self._related_only(f) for f in filters]

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
                kwargs["queryset"] = member_workspaces(request)
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
