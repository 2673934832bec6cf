"""Admin for the host API's records: the proxy call audit (browsable, filterable by run, runner, action
and outcome) and platform action requests, where an operator approves or rejects pending ones.

Imported by `runners.admin` so Django's admin autodiscovery registers it.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.utils.safestring import SafeString
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from bindings.admin_scope import WorkspaceRoleAdmin
from bindings.models import Workspace
from runners.actions.platform_actions import platform_action_approve, platform_action_reject, platform_actions_expire
from runners.models import PlatformActionRequest, ProxyCallAudit
from transcripts.admin import ReadOnlyAdminMixin, ReadOnlyWorkspaceAdmin, pretty_json


class _TextFilter(admin.SimpleListFilter):
    """Filter on an exact value given in the query string (e.g. from a link); choices are the most
    frequent recent values, so the list never scans the whole table."""

    field = ""
    recent = 500

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]) -> list[tuple[str, str]]:
        values: list[str] = []
        rows = model_admin.get_queryset(request).order_by("-id").values_list(self.field, flat=True)[: self.recent]
        for value in rows:
            if value and value not in values:
                values.append(value)
        selected = self.value()
        if selected and selected not in values:
            values.insert(0, selected)
        return [(v, v) for v in values[:20]]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        return queryset.filter(**{self.field: value}) if value else queryset


class RunIdFilter(_TextFilter):
    title = parameter_name = field = "run_id"


class RunnerIdFilter(_TextFilter):
    title = parameter_name = field = "runner_id"


@admin.register(ProxyCallAudit)
class ProxyCallAuditAdmin(ReadOnlyAdminMixin, WorkspaceRoleAdmin[ProxyCallAudit]):
    list_display = ["created_at", "action", "outcome", "resource", "run_id", "runner_id", "scope", "duration_ms"]
    list_filter = ["outcome", "action", RunnerIdFilter, RunIdFilter]
    search_fields = ["run_id", "resource", "scope"]
    date_hierarchy = "created_at"
    list_per_page = 100
    fields = readonly_fields = (
        "created_at", "run_id", "runner_id", "workspace_id", "caller", "action", "resource", "scope", "outcome",
        "duration_ms",
    )  # fmt: skip

    def get_queryset(self, request: HttpRequest) -> QuerySet[ProxyCallAudit]:
        queryset = super().get_queryset(request)
        if getattr(request.user, "is_superuser", False):
            return queryset
        member_of = Workspace.objects.filter(memberships__user_id=request.user.pk or 0).values_list("pk", flat=True)
        return queryset.filter(workspace_id__in=list(member_of))


@admin.register(PlatformActionRequest)
class PlatformActionRequestAdmin(ReadOnlyWorkspaceAdmin[PlatformActionRequest]):
    list_display = [
        "created_at", "action", "status", "surface", "origin", "runner_id", "run", "expires_at", "may_outlive_run",
        "decided_by",
    ]  # fmt: skip
    list_filter = ["status", "action", "origin", "surface", "workspace"]
    search_fields = ["action", "runner_id", "run__run_id"]
    list_select_related = ["run", "workspace"]
    actions = ["approve", "reject"]
    fields = readonly_fields = (
        "created_at", "workspace", "run", "runner_id", "binding_key", "surface", "origin", "action",
        "target_display", "payload_display", "may_outlive_run", "expires_at", "status", "error_display",
        "result_display", "decided_by", "decided_at", "executed_at",
    )  # fmt: skip

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        # Lazy expiry: the list never shows as pending a request whose time ran out or whose run ended.
        platform_actions_expire(queryset=self.get_queryset(request))
        return super().changelist_view(request, extra_context)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Approve/reject are admin actions on the list; they need the change permission there.
        return obj is None and bool(request.user.has_perm("runners.change_platformactionrequest"))

    @admin.display(description=_("target"))
    def target_display(self, obj: PlatformActionRequest) -> SafeString:
        return pretty_json(obj.target)

    @admin.display(description=_("payload"))
    def payload_display(self, obj: PlatformActionRequest) -> SafeString:
        return pretty_json(obj.payload)

    @admin.display(description=_("error"))
    def error_display(self, obj: PlatformActionRequest) -> SafeString:
        return pretty_json(obj.error)

    @admin.display(description=_("result"))
    def result_display(self, obj: PlatformActionRequest) -> SafeString:
        return pretty_json(obj.result)

    @admin.action(description=_("Approve and execute the selected pending requests"))
    def approve(self, request: HttpRequest, queryset: QuerySet[PlatformActionRequest]) -> None:
        # Every selected request goes to the service: a pending one executes, an expired one records the
        # late attempt, and the operator is told why each that did not execute did not.
        outcomes = [platform_action_approve(request=item, operator=str(request.user)) for item in queryset]
        done = [o.request for o in outcomes if o.decided]
        executed = sum(1 for r in done if r.status == PlatformActionRequest.Status.EXECUTED)
        if done or not outcomes:
            self.message_user(
                request,
                gettext("%(executed)d executed, %(failed)d failed.")
                % {"executed": executed, "failed": len(done) - executed},
                messages.INFO,
            )
        refused = [o.request for o in outcomes if not o.decided]
        expired = [r for r in refused if r.status == PlatformActionRequest.Status.EXPIRED]
        run_ended = [r.pk for r in expired if (r.error or {}).get("code") == "run_ended"]
        if run_ended:
            self.message_user(
                request,
                gettext(
                    "Not executed: the run of request(s) %(ids)s had already ended, and the runner did "
                    "not say the action may outlive its run. Recorded as expired."
                )
                % {"ids": _ids(run_ended)},
                messages.WARNING,
            )
        overdue = [r.pk for r in expired if r.pk not in run_ended]
        if overdue:
            self.message_user(
                request,
                gettext("Not executed: request(s) %(ids)s expired before anyone decided.") % {"ids": _ids(overdue)},
                messages.WARNING,
            )
        decided = [r.pk for r in refused if r.status != PlatformActionRequest.Status.EXPIRED]
        if decided:
            self.message_user(
                request,
                gettext("Request(s) %(ids)s were already decided.") % {"ids": _ids(decided)},
                messages.WARNING,
            )

    @admin.action(description=_("Reject the selected pending requests"))
    def reject(self, request: HttpRequest, queryset: QuerySet[PlatformActionRequest]) -> None:
        outcomes = [platform_action_reject(request=item, operator=str(request.user)) for item in queryset]
        rejected = sum(1 for o in outcomes if o.decided)
        self.message_user(request, gettext("%(count)d rejected.") % {"count": rejected}, messages.INFO)
        late = [o.request.pk for o in outcomes if not o.decided]
        if late:
            self.message_user(
                request,
                gettext("Request(s) %(ids)s were no longer pending; left as they were.") % {"ids": _ids(late)},
                messages.WARNING,
            )


def _ids(pks: list[int]) -> str:
    return ", ".join(f"#{pk}" for pk in pks)
