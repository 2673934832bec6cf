"""Every admin page against another workspace's objects (issue 22, BOLA matrix).

A staff member of workspace `mine`, holding every permission on the workspace-scoped models, tries each
registered ModelAdmin on the other workspace (`theirs`): the changelist (with its list filters and a
search) and the add form show none of their objects or names; their object's change, delete and history
pages are refused; posting the change and delete forms and every admin action on their object changes
nothing; the autocomplete of every foreign key offers none of theirs. The admin's extra pages (usage report,
runner refresh, index, ...) are listed too. A ModelAdmin or admin page the site serves that the matrix does
not list fails the test.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib import admin
from django.contrib.contenttypes.models import ContentType
from django.db import models
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, reverse

from tests.security.conftest import MARKER, Mine, Theirs, grant_permissions, snapshot

pytestmark = pytest.mark.django_db

SCOPED = [
    "bindings.Workspace", "bindings.ApiKey", "bindings.Bot", "bindings.AgentBinding",
    "transcripts.EventLog", "transcripts.TranscriptItem", "transcripts.StateEntry", "transcripts.RetentionPurge",
    "runners.Run", "runners.ProxyCallAudit", "runners.PlatformActionRequest", "runtimes.DevelopmentToken",
    "runtimes.DevelopmentSession", "runners.Budget", "runners.DailySpend",
    "artifacts.Artifact",
    "resources.ModelProvider", "resources.Model", "resources.KnowledgeBase", "resources.MCPServer",
    "platforms.PlatformDelivery", "platforms.InboundRefusal",
    "webhooks.WebhookEndpoint", "webhooks.WebhookDelivery", "schedules.Schedule",
    "takeover.ConversationHold", "takeover.WaitingConversation",
    "alerts.Alert", "alerts.AlertSettings",
    "people.Person", "people.PersonAudit",
]  # fmt: skip
"""Admins of objects that belong to one workspace: other staff must not see or touch another's."""

HOST_WIDE = {
    "auth.User": "accounts of the whole host; their permissions make a superuser",
    "auth.Group": "permission groups of the whole host",
    "bindings.RunnerDescriptor": "the runner catalog the plugin runtime offers every workspace",
    "artifacts.WorkspaceArtifactSettings": "a workspace's upload cap; superusers only, so members cannot raise it",
}
"""Admins of host-wide data: only those given its permissions (host operators) use them."""

# Admin URLs that are not a ModelAdmin's standard pages → the statuses a staff member of `mine` may get.
EXTRA_PAGES: dict[str, set[int]] = {
    "admin:index": {200},
    "admin:app_list": {200},
    "admin:login": {200, 302},
    "admin:password_change_done": {200},
    "admin:jsi18n": {200},
    "admin:autocomplete": {200, 403},  # tried per foreign key below
    "admin:view_on_site": {404},  # none of the models has a public URL
    "admin-usage": {200},  # scoped to the member's workspaces
    "admin-conversations": {200},  # scoped to the member's workspaces
    "admin-conversation": {404},  # tried with their conversation
    "admin:bindings_runnerdescriptor_refresh": {405},  # POST only; host-wide, the same for every operator
    "admin:logout": {200, 302},
    "admin:people_person_export": {404},  # tried with their person: not among the member's
    # POST only; a member of another workspace is refused (tests/takeover).
    "admin:takeover_conversation_takeover": {405},
    "admin:takeover_conversation_release": {405},
    "admin:bindings_bot_test_connection": {403},  # tried with their bot: not found among the member's
}
_STANDARD = ("_changelist", "_add", "_history", "_delete", "_change")


def _admin_url_names() -> set[str]:
    def walk(patterns: list[Any], namespace: str = "") -> Any:
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                yield from walk(pattern.url_patterns, pattern.namespace or namespace)
            elif isinstance(pattern, URLPattern) and pattern.name:
                yield f"{namespace}:{pattern.name}" if namespace else pattern.name

    admin_patterns = [p for p in get_resolver().url_patterns if str(p.pattern).startswith("admin/")]
    return {name for name in walk(admin_patterns) if not name.endswith(_STANDARD)}


def test_every_model_admin_and_admin_page_is_in_the_matrix():
    registered = {model._meta.label for model in admin.site._registry}

    assert sorted(registered - set(SCOPED) - set(HOST_WIDE)) == [], "add each new admin to SCOPED or HOST_WIDE"
    assert sorted((set(SCOPED) | set(HOST_WIDE)) - registered) == [], "the matrix lists admins that are gone"
    assert sorted(_admin_url_names() - set(EXTRA_PAGES)) == [], "add each new admin page to EXTRA_PAGES"


def _url(model: type[models.Model], page: str, *args: Any) -> str:
    return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_{page}", args=args)


def _visible(response: Any) -> str:
    return response.content.decode(errors="replace") if response.status_code == 200 else ""


def test_a_staff_member_reaches_nothing_of_another_workspace_in_admin(theirs: Theirs, mine: Mine) -> None:
    grant_permissions(mine.staff, SCOPED)
    client = Client()
    client.force_login(mine.staff)
    before = snapshot(theirs.workspace)
    wrong: list[str] = []

    def check(what: str, response: Any, allowed: set[int]) -> None:
        if response.status_code not in allowed:
            wrong.append(f"{what}: {response.status_code}, expected {sorted(allowed)}")
        elif MARKER in (page := _visible(response)):
            at = page.index(MARKER)
            wrong.append(f"{what}: the page shows their objects: ...{page[max(0, at - 150) : at + 50]!r}")

    for label in SCOPED:
        row = theirs.objects[label]
        model = type(row)
        model_admin = admin.site._registry[model]
        changelist = _url(model, "changelist")
        check(f"{label} changelist", client.get(changelist), {200})
        if model_admin.search_fields:
            check(f"{label} search", client.get(changelist, {"q": "their"}), {200})
        check(f"{label} add", client.get(_url(model, "add")), {200, 403})
        for page in ("change", "delete", "history"):
            # Django answers an object outside the admin's queryset with a redirect to the index.
            check(f"{label} {page} of theirs", client.get(_url(model, page, row.pk)), {302, 403, 404})
        client.post(_url(model, "change", row.pk), {"name": "mine now"})
        client.post(_url(model, "delete", row.pk), {"post": "yes"})
        for action in model_admin.get_actions(_request_of(client, mine.staff)):
            client.post(changelist, {"action": action, "_selected_action": [row.pk], "index": 0, "post": "yes"})
        for field in model._meta.get_fields():
            if not ((field.is_relation and field.many_to_one) or field.many_to_many) or field.related_model is None:
                continue
            related_admin = admin.site._registry.get(field.related_model)  # type: ignore[arg-type]
            if related_admin is None or not related_admin.search_fields:
                continue
            query = {
                "app_label": model._meta.app_label,
                "model_name": str(model._meta.model_name),
                "field_name": field.name,
            }
            check(f"{label}.{field.name} autocomplete", client.get(reverse("admin:autocomplete"), query), {200, 403})

    for name, allowed in EXTRA_PAGES.items():
        if name in {"admin:autocomplete", "admin:logout"}:
            continue
        check(name, client.get(_reverse_extra(name, theirs)), allowed)

    assert wrong == [], "\n".join(wrong)
    assert snapshot(theirs.workspace) == before


def _reverse_extra(name: str, theirs: Theirs) -> str:
    if name == "admin:app_list":
        return reverse(name, kwargs={"app_label": "bindings"})
    if name == "admin-conversation":
        item: Any = theirs.objects["transcripts.TranscriptItem"]
        return reverse(name, kwargs={"workspace_id": item.workspace_id, "conversation_id": item.conversation_id})
    if name == "admin:view_on_site":
        bot = theirs.objects["bindings.Bot"]
        return reverse(name, args=[ContentType.objects.get_for_model(bot).pk, bot.pk])
    if name == "admin:bindings_bot_test_connection":
        return reverse(name, args=[theirs.objects["bindings.Bot"].pk])
    if name == "admin:people_person_export":
        return reverse(name, args=[theirs.objects["people.Person"].pk])
    if name.startswith("admin:takeover_conversation_"):
        kwargs = {"workspace_id": theirs.workspace.pk, "conversation_id": theirs.ids["conversation_id"]}
        return reverse(name, kwargs=kwargs)
    return reverse(name)


def _request_of(client: Client, user: Any) -> Any:
    from django.test import RequestFactory

    request = RequestFactory().get("/admin/")
    request.user = user
    return request
