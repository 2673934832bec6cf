"""Admin for runner descriptors (read-only, with a "Refresh from runtime" button on the list and the last
refresh's plugin errors above it; labels in the admin's language, the config schema as a table) and runs
(read-only, with their result events as a timeline and usage as tables — runners/run_timeline.py — and a
"Cancel selected runs" action; the list fits a laptop:
short ids, coloured status, duration). The development tokens and sessions are `runtimes.admin`'s."""

from __future__ import annotations

import json
import uuid
from typing import Any

from django.conf import settings
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from bindings.forms import inline_code_html, manifest_locale
from bindings.models import RunnerDescriptor
from foundation.readable import json_html
from foundation.tracing import trace_url
from langbot_sdk.protocol import AgentAPIException
from runners.lifecycle.retry import run_attempt
from runners.lifecycle.services import run_cancel_request
from runners.models import Run
from runners.run_timeline import run_timeline_html, runner_usage_html
from runtimes.catalog import runner_descriptors_refresh, runner_refresh_problems
from transcripts.admin import (
    ConversationFilter,
    ReadOnlyAdminMixin,
    ReadOnlyWorkspaceAdmin,
    pretty_json,
    transcript_link,
)
from transcripts.models import EventLog


@admin.register(RunnerDescriptor)
class RunnerDescriptorAdmin(ReadOnlyAdminMixin, admin.ModelAdmin[RunnerDescriptor]):
    change_list_template = "admin/bindings/runnerdescriptor/change_list.html"
    list_display = [
        "runner_id", "label_display", "plugin_version", "status", "problems_display", "source", "workspace",
        "last_seen_at",
    ]  # fmt: skip
    list_filter = ["status", "source", "plugin_author"]
    search_fields = ["runner_id", "plugin_name", "runner_name"]
    fields = readonly_fields = (
        "runner_id",
        "source",
        "workspace",
        "label_display",
        "description_display",
        "plugin_author",
        "plugin_name",
        "plugin_version",
        "runner_name",
        "status",
        "load_error_display",
        "capabilities_display",
        "permissions_display",
        "context_display",
        "config_schema_display",
        "manifest_sha256",
        "last_seen_at",
        "created_at",
        "updated_at",
    )

    @admin.display(description=_("label"))
    def label_display(self, obj: RunnerDescriptor) -> str:
        return obj.label_text(manifest_locale())

    @admin.display(description=_("description"))
    def description_display(self, obj: RunnerDescriptor) -> SafeString:
        return inline_code_html(obj.description_text(manifest_locale()) or "—")

    @admin.display(description=_("load error / warnings"))
    def problems_display(self, obj: RunnerDescriptor) -> SafeString | str:
        """The load error, else what the refresh dropped from the runner's manifest (LangBot's runners keep
        their mapping warnings in it), so the list shows them without opening each runner."""
        if obj.load_error:
            return format_html('<span style="color:#c92a2a">{}</span>', obj.load_error)
        warnings = ((obj.manifest or {}).get("metadata") or {}).get("langbot", {}).get("warnings") or []
        if not warnings:
            return "—"
        return format_html_join(format_html("<br>"), '<span style="color:#b35c00">{}</span>', ((w,) for w in warnings))

    @admin.display(description=_("load error"))
    def load_error_display(self, obj: RunnerDescriptor) -> str:
        return format_html('<pre style="white-space:pre-wrap">{}</pre>', obj.load_error or "—")

    def _json(self, value: Any) -> str:
        return json_html(value)  # key and value lines, not the manifest's JSON text

    @admin.display(description=_("capabilities"))
    def capabilities_display(self, obj: RunnerDescriptor) -> str:
        return self._json(obj.capabilities)

    @admin.display(description=_("permissions"))
    def permissions_display(self, obj: RunnerDescriptor) -> str:
        return self._json(obj.permissions)

    @admin.display(description=_("context policy"))
    def context_display(self, obj: RunnerDescriptor) -> str:
        return self._json(obj.context_policy)

    @admin.display(description=_("config schema"))
    def config_schema_display(self, obj: RunnerDescriptor) -> SafeString | str:
        """One row per config item, as a binding's form asks for it (a table, not the manifest's JSON)."""
        items = [item for item in obj.config_schema or [] if isinstance(item, dict)]
        if not items:
            return gettext("no config")
        locale = manifest_locale()

        def text(value: Any) -> str:
            if isinstance(value, dict):
                return str(value.get(locale) or value.get("en_US") or next(iter(value.values()), ""))
            return "" if value is None else str(value)

        def default(item: dict[str, Any]) -> str:
            if "default" not in item or item["default"] in (None, "", [], {}):
                return "—"
            value = item["default"]
            return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)

        def options(item: dict[str, Any]) -> SafeString:
            names = [str(o.get("name")) for o in item.get("options") or [] if isinstance(o, dict)]
            return format_html_join(" ", "<code>{}</code>", ((name,) for name in names))

        rows = format_html_join(
            "",
            "<tr><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}{}</td></tr>",
            (
                (item.get("name", ""), item.get("type", ""), "yes" if item.get("required") else "no", default(item),
                 text(item.get("label")), inline_code_html(text(item.get("description"))), options(item))
                for item in items
            ),
        )  # fmt: skip
        return format_html(
            '<table class="config-schema"><thead><tr><th>name</th><th>type</th><th>required</th><th>default</th>'
            "<th>label</th><th>description / options</th></tr></thead><tbody>{}</tbody></table>",
            rows,
        )

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        # Plugins that failed before naming a runner have no row in the list: the last refresh's errors and
        # warnings are shown above it instead (templates/admin/bindings/runnerdescriptor/change_list.html).
        problems = runner_refresh_problems() or {}

        def where(item: dict[str, Any]) -> str:
            names = [item.get("path") or item.get("plugin"), item.get("runner_id")]
            return " ".join(str(name) for name in dict.fromkeys(names) if name)

        context = {
            **(extra_context or {}),
            "refresh_problems_at": problems.get("at"),
            "refresh_errors": [(where(e), e.get("error") or "") for e in problems.get("plugin_errors", [])],
            "refresh_warnings": [(where(w), w.get("warning") or "") for w in problems.get("plugin_warnings", [])],
        }
        return super().changelist_view(request, extra_context=context)

    def get_urls(self) -> list[URLPattern]:
        refresh = path(
            "refresh/", self.admin_site.admin_view(self.refresh_view), name="bindings_runnerdescriptor_refresh"
        )
        return [refresh, *super().get_urls()]

    def refresh_view(self, request: HttpRequest) -> HttpResponse:
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        try:
            result = runner_descriptors_refresh(connect_wait=0)
        except AgentAPIException as exc:
            messages.error(request, gettext("Plugin runtime unavailable: %(reason)s") % {"reason": exc.error.message})
        else:
            messages.success(
                request,
                gettext("Synced: %(available)d available, %(errored)d with load errors, %(missing)d missing.")
                % {
                    "available": len(result.available),
                    "errored": len(result.errored),
                    "missing": len(result.missing),
                },
            )
            for runner_id in result.errored:
                messages.warning(
                    request, gettext("%(runner)s failed to load; see its load error.") % {"runner": runner_id}
                )
            if result.plugin_errors or result.plugin_warnings:
                messages.warning(
                    request,
                    gettext("%(errors)d plugin error(s), %(warnings)d warning(s): listed above the runners.")
                    % {"errors": len(result.plugin_errors), "warnings": len(result.plugin_warnings)},
                )
        return HttpResponseRedirect(reverse("admin:bindings_runnerdescriptor_changelist"))


STATUS_COLOURS: dict[str, str] = {
    Run.Status.QUEUED: "#b35c00", Run.Status.RUNNING: "#3b5bdb", Run.Status.COMPLETED: "#2b8a3e",
    Run.Status.FAILED: "#c92a2a", Run.Status.TIMEOUT: "#c92a2a", Run.Status.CANCELLED: "#868e96",
}  # fmt: skip


def run_duration_text(run: Run) -> str:
    """From start to end ("running 12 s" while it runs); queue time is not counted."""
    if run.started_at is None:
        return "—"
    end = run.finished_at
    seconds = ((end or timezone.now()) - run.started_at).total_seconds()
    text = f"{seconds:.1f} s" if seconds < 60 else f"{int(seconds // 60)} min {int(seconds % 60)} s"
    return text if end is not None else f"running {text}"


class RunnerFilter(admin.SimpleListFilter):
    """Filter by runner, offering the known runners (cheap) rather than a DISTINCT over every run."""

    title = "runner"
    parameter_name = "runner_id"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]) -> list[tuple[str, str]]:
        known = list(RunnerDescriptor.objects.order_by("runner_id").values_list("runner_id", flat=True))
        selected = self.value()
        # A filter without choices is dropped by the changelist, so a runner that has since disappeared
        # (or a link to one) must still be offered.
        if selected and selected not in known:
            known.insert(0, selected)
        return [(r, r) for r in known]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        return queryset.filter(runner_id=value) if value else queryset


@admin.register(Run)
class RunAdmin(ReadOnlyWorkspaceAdmin[Run]):
    # Fits a 1400 px screen: the full id, reason, workspace and end time are on the run's page.
    list_display = [
        "short_id",
        "status_display",
        "binding_key",
        "runner_short",
        "conversation_short",
        "created_at",
        "duration",
    ]
    list_display_links = ["short_id"]
    list_filter = ["status", "binding", RunnerFilter, ConversationFilter, "is_observer", "workspace"]
    search_fields = ["run_id", "conversation_id"]
    list_select_related = ["workspace", "event"]
    date_hierarchy = "created_at"
    actions = ["cancel_runs"]
    fields = (
        "run_id",
        "trace_display",
        "workspace",
        "status",
        "status_reason",
        "duration",
        "error_display",
        "binding",
        "binding_key",
        "runner_id",
        "is_observer",
        "event_link",
        "input_events_display",
        "not_before",
        "conversation",
        "thread_id",
        "output",
        "timeline",
        "usage_display",
        "host_usage_display",
        "timeout_seconds",
        "created_at",
        "started_at",
        "finished_at",
        "deadline_at",
        "cancel_requested_at",
        "cancel_reason",
        "retry_display",
        "attempts",
        "last_seq",
        "lease_owner",
        "lease_expires_at",
    )
    readonly_fields = fields

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Run], search_term: str
    ) -> tuple[QuerySet[Run], bool]:
        # `run_id` is a UUID column: an icontains search on it would cast every row to text. Match a
        # whole id exactly; anything else searches conversation ids only.
        term = search_term.strip()
        try:
            return queryset.filter(run_id=uuid.UUID(term)), False
        except ValueError:
            pass
        if not term:
            return queryset, False
        return queryset.filter(conversation_id__icontains=term), False

    @admin.display(description=_("run"), ordering="run_id")
    def short_id(self, obj: Run) -> SafeString:
        run_id = str(obj.run_id)
        return format_html('<code title="{}">{}</code>', run_id, run_id[:8])

    @admin.display(description=_("trace"))
    def trace_display(self, obj: Run) -> SafeString:
        """The run's trace id, linked to the trace UI when `LANGBOT_TRACE_URL_TEMPLATE` names one (docs/tracing.md)."""
        url = trace_url(settings.LANGBOT_TRACE_URL_TEMPLATE, obj.trace_hex)
        if not url:
            return format_html("<code>{}</code>", obj.trace_hex)
        return format_html(
            '<a href="{}" target="_blank" rel="noopener noreferrer"><code>{}</code></a>', url, obj.trace_hex
        )

    @admin.display(description=_("status"), ordering="status")
    def status_display(self, obj: Run) -> SafeString:
        colour = STATUS_COLOURS.get(obj.status, "#6b7483")
        observer = " · " + gettext("observer") if obj.is_observer else ""
        return format_html(
            '<span title="{}" style="color:#fff;background:{};border-radius:9px;padding:1px 8px;'
            'font-weight:600;white-space:nowrap">{}</span>{}',
            obj.status_reason or obj.status, colour, obj.get_status_display(), observer,
        )  # fmt: skip

    @admin.display(description=_("runner"), ordering="runner_id")
    def runner_short(self, obj: Run) -> SafeString:
        # `plugin:langbot/qa-runner/default` → `qa-runner`: the author and the usual `default` are noise here.
        parts = obj.runner_id.removeprefix("plugin:").split("/")
        short = parts[1] if len(parts) == 3 and parts[2] == "default" else "/".join(parts[1:]) or obj.runner_id
        return format_html('<span title="{}">{}</span>', obj.runner_id, short)

    @admin.display(description=_("attempt"))
    def retry_display(self, obj: Run) -> SafeString:
        """Which attempt of its event this run is (the binding's `delivery_policy.retry`), and the run it retried."""
        attempt = run_attempt(run=obj)
        if attempt.retry_of is None:
            return format_html("{}", attempt.number)
        retried = Run.objects.filter(run_id=attempt.retry_of).only("pk").first()
        url = reverse("admin:runners_run_change", args=[retried.pk]) if retried is not None else ""
        return format_html('{} — automatic retry of <a href="{}"><code>{}</code></a>', attempt.number, url,
                           attempt.retry_of[:8])  # fmt: skip

    @admin.display(description=_("duration"))
    def duration(self, obj: Run) -> str:
        return run_duration_text(obj)

    @admin.display(description=_("conversation"), ordering="conversation_id")
    def conversation(self, obj: Run) -> SafeString:
        return transcript_link(workspace_id=obj.workspace_id, conversation_id=obj.conversation_id)

    @admin.display(description=_("conversation"), ordering="conversation_id")
    def conversation_short(self, obj: Run) -> SafeString:
        return transcript_link(workspace_id=obj.workspace_id, conversation_id=obj.conversation_id, short=True)

    @admin.display(description=_("event"))
    def event_link(self, obj: Run) -> SafeString:
        url = reverse("admin:transcripts_eventlog_change", args=[obj.event_id])
        return format_html('<a href="{}">{} ({})</a>', url, obj.event.event_id, obj.event.event_type)

    @admin.display(description=_("later messages"))
    def input_events_display(self, obj: Run) -> SafeString:
        """The messages merged into the run (`merge`) or handed to it while it ran (`steer`), in order."""
        pks = [pk for pk in obj.input_events or [] if isinstance(pk, int)]
        if not pks:
            return format_html("{}", "—")
        events = EventLog.objects.filter(workspace_id=obj.workspace_id).in_bulk(pks)
        return format_html_join(
            ", ",
            '<a href="{}">{}</a>',
            (
                (reverse("admin:transcripts_eventlog_change", args=[pk]), events[pk].event_id)
                for pk in pks
                if pk in events
            ),
        )

    @admin.display(description=_("error"))
    def error_display(self, obj: Run) -> SafeString:
        return pretty_json(obj.error)

    @admin.display(description=_("results"))
    def timeline(self, obj: Run) -> SafeString:
        return run_timeline_html(obj)

    @admin.display(description=_("usage (reported by the runner)"))
    def usage_display(self, obj: Run) -> SafeString:
        return runner_usage_html(obj)

    @admin.display(description=_("model usage and cost (counted by the host)"))
    def host_usage_display(self, obj: Run) -> SafeString | str:
        host = (obj.usage or {}).get("host") if isinstance(obj.usage, dict) else None
        if not isinstance(host, dict) or not (host.get("models") or host.get("quota_exceeded")):
            return gettext("no model calls")
        currency = host.get("currency", "")
        rows = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            (
                (model_id, t.get("calls"), t.get("prompt_tokens"), t.get("completion_tokens"), t.get("total_tokens"),
                 f"{t['cost']} {currency}" if "cost" in t else gettext("not priced"),
                 gettext("partial") if t.get("partial") else "")
                for model_id, t in sorted((host.get("models") or {}).items())
            ),
        )  # fmt: skip
        total = f"{host['cost']} {currency}" if "cost" in host else ""
        headers = format_html_join(
            "", "<th>{}</th>",
            ((gettext(word),) for word in ("model", "calls", "prompt", "completion", "total", "cost")),
        )  # fmt: skip
        table = format_html(
            "<table><thead><tr>{}<th></th></tr></thead><tbody>{}<tr><th>{}</th><td></td><td>{}</td><td>{}</td>"
            "<td>{}</td><td>{}</td><td></td></tr></tbody></table>",
            headers, rows, gettext("all models"), host.get("prompt_tokens"), host.get("completion_tokens"),
            host.get("total_tokens"), total,
        )  # fmt: skip
        refused = host.get("quota_exceeded")
        if isinstance(refused, dict):
            # A model call refused for a budget: the runner was told; the operator sees it here.
            return format_html("{}<p><strong>quota_exceeded</strong>: {}</p>", table, refused.get("message", ""))
        return table

    @admin.action(description=_("Cancel selected runs"))
    def cancel_runs(self, request: HttpRequest, queryset: QuerySet[Run]) -> None:
        reason = f"cancelled in admin by {request.user}"
        active = list(queryset.filter(status__in=Run.ACTIVE_STATUSES))
        outcomes = [run_cancel_request(run=run, reason=reason) for run in active]
        cancelled = sum(1 for run in outcomes if run.status == Run.Status.CANCELLED)
        requested = sum(1 for run in outcomes if run.status == Run.Status.RUNNING)
        skipped = queryset.count() - len(active)
        parts = [
            gettext("%(count)d cancelled") % {"count": cancelled},
            gettext("%(count)d asked to stop (running)") % {"count": requested},
        ]
        if skipped:
            parts.append(gettext("%(count)d already finished, left as they were") % {"count": skipped})
        messages.success(request, gettext("Runs: %(parts)s.") % {"parts": ", ".join(parts)})


# The host API records (proxy call audit, platform action requests) have their own admin module, and so
# have budgets and daily spend (runners/costs.py).
from runners import costs_admin  # noqa: E402, F401
from runners.actions import admin as actions_admin  # noqa: E402, F401
