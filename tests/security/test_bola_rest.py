"""Every REST route against another workspace's objects (issue 22, BOLA matrix).

ROUTES lists every URL the project serves outside admin, with each method and what a caller of workspace
`mine` sends there: path parameters are the ids of the other workspace's objects (`theirs`), bodies refer to
their objects where a body can. The caller — an API key of `mine`, then a staff member of `mine` in a browser
session — must get the expected refusal (404 for another workspace's object, docs/architecture.md, "The REST API"), see
none of their objects in any answer, and change nothing of theirs. A route or method the project serves that ROUTES does
not list fails the test: a new endpoint is added here, with the refusal it must give.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import pytest
from django.apps import apps
from django.urls import URLPattern, URLResolver, get_resolver
from rest_framework.test import APIClient

from bindings.models import Bot
from bindings.services import api_key_create
from platforms.schedules.models import Schedule
from platforms.webhooks.models import WebhookEndpoint
from resources.models import KnowledgeBase
from runners.models import Budget
from tests.factories import AgentBindingFactory, ModelFactory, ModelProviderFactory
from tests.security.conftest import MARKER, Mine, Theirs, snapshot
from webchat.widget import widget_public_id

pytestmark = pytest.mark.django_db

GONE = {404}
"""Another workspace's object answers 404, as an unknown one does."""
REFUSED_REFERENCE = {400, 404}
"""A body naming another workspace's object is refused as naming an unknown one."""
OWN = {200, 201, 202, 204}
"""Acts on the caller's own workspace only (checked: no object of theirs in the answer, none of theirs changed)."""


@dataclass(frozen=True)
class Attempt:
    expected: set[int]
    body: dict[str, Any] | None = None
    mixed_parent: bool = False
    """Also tried with the caller's own parent object in the path and their child object (e.g. my knowledge
    base, their document)."""


def _refs(ids: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Create bodies that each name one object of theirs."""
    return {
        "event": {"bot_id": ids["bot_id"], "input": {"text": "hi"}},
        "binding": {
            "scope": {"scope_type": "bot", "scope_id": ids["bot_id"]},
            "event_types": ["message.received"],
            "runner_id": "plugin:langbot/qa-runner/default",
        },
        "model": {"provider_id": ids["provider_id"], "name": "m", "kind": "llm"},
        "kb": {"name": "kb", "embedding_model_id": ids["model_id"]},
        "schedule_bot": {"cron": "0 9 * * *", "bot_id": ids["bot_id"]},
        "schedule_binding": {"cron": "0 9 * * *", "binding_id": ids["binding_id"]},
        "budget": {"scope": "bot", "bot_id": ids["bot_id"], "amount": "1"},
        "webhook": {
            "url": "https://example.com/hook",
            "event_types": ["run.completed"],
            "binding_id": ids["binding_id"],
        },
    }


# route → method → attempt. Bodies are names of _refs() (or None).
ROUTES: dict[str, dict[str, tuple[set[int], str | None] | Attempt]] = {
    "api/v1/events": {"POST": (REFUSED_REFERENCE, "event")},
    "api/v1/events/<str:event_id>": {"GET": (GONE, None)},
    "api/v1/runners": {"GET": (OWN, None)},  # the host-wide runner catalog: no workspace objects
    # Operators only: a workspace's key gets 403; a staff session is an operator (no runtime here: 503).
    "api/v1/runners/refresh": {"POST": ({403, 503}, None)},
    "api/v1/runs": {"GET": (OWN, None)},
    "api/v1/runs/<str:run_id>": {"GET": (GONE, None)},
    "api/v1/runs/<str:run_id>/events": {"GET": (GONE, None)},
    "api/v1/runs/<str:run_id>/cancel": {"POST": (GONE, None)},
    "api/v1/runs/<str:run_id>/stream": {"GET": (GONE, None)},
    "api/v1/ws-tickets": {"POST": (OWN, None)},  # a ticket for the caller's own session/key
    "api/v1/budgets": {"GET": (OWN, None), "POST": (REFUSED_REFERENCE, "budget")},
    "api/v1/persons": {"GET": (OWN, None)},
    "api/v1/persons/<str:person_id>": {"GET": (GONE, None)},
    "api/v1/persons/<str:person_id>/export": {"GET": (GONE, None)},
    "api/v1/persons/<str:person_id>/erase": {"POST": (GONE, None)},
    "api/v1/budgets/<str:budget_id>": {"GET": (GONE, None), "PATCH": (GONE, None), "DELETE": (GONE, None)},
    "api/v1/costs": {"GET": (OWN, None)},
    "api/v1/actions": {"GET": (OWN, None)},
    "api/v1/actions/<str:action_id>": {"GET": (GONE, None)},
    "api/v1/actions/<str:action_id>/approve": {"POST": (GONE, None)},
    "api/v1/actions/<str:action_id>/reject": {"POST": (GONE, None)},
    "api/v1/bindings": {"GET": (OWN, None), "POST": (REFUSED_REFERENCE, "binding")},
    "api/v1/bindings/<slug:binding_id>": {"GET": (GONE, None), "PATCH": (GONE, None), "DELETE": (GONE, None)},
    "api/v1/bots": {"GET": (OWN, None), "POST": (OWN, None)},  # a bot names nothing of another workspace
    "api/v1/bots/<slug:bot_id>": {"GET": (GONE, None), "PATCH": (GONE, None), "DELETE": (GONE, None)},
    # Members: their member is no member of mine; adding a host account names nothing of another workspace.
    "api/v1/members": {"GET": (OWN, None), "POST": ({400}, None)},
    "api/v1/members/<str:username>": {"GET": (GONE, None), "PATCH": (GONE, None), "DELETE": (GONE, None)},
    # The caller's own membership: a key is none (403); the staff member is mine's last owner (409).
    "api/v1/membership": {"GET": (OWN, None), "DELETE": ({403, 409}, None)},
    # Conversation ids are per workspace: theirs is an empty conversation of mine.
    "api/v1/conversations/<path:conversation_id>/transcript": {"GET": (OWN | GONE, None)},
    # Human takeover: a conversation the caller's workspace never saw is not found.
    "api/v1/conversations/<path:conversation_id>/takeover": {"POST": (GONE, None)},
    "api/v1/conversations/<path:conversation_id>/release": {"POST": (GONE, None)},
    "api/v1/conversations/<path:conversation_id>/messages": {"POST": (GONE, None)},
    "api/v1/handoffs": {"GET": (OWN, None)},
    "api/v1/alerts": {"GET": (OWN, None)},
    "api/v1/artifacts": {"POST": ({400, 415}, None)},  # an upload names nothing of another workspace
    "api/v1/artifacts/<str:artifact_id>": {"GET": (GONE, None)},
    "api/v1/artifacts/<str:artifact_id>/content": {"GET": (GONE, None)},
    "api/v1/model-providers": {"GET": (OWN, None), "POST": ({400}, None)},
    "api/v1/model-providers/<slug:provider_id>": {"GET": (GONE, None), "PATCH": (GONE, None), "DELETE": (GONE, None)},
    "api/v1/models": {"GET": (OWN, None), "POST": (REFUSED_REFERENCE, "model")},
    "api/v1/models/<slug:model_id>": {"GET": (GONE, None), "PATCH": (GONE, None), "DELETE": (GONE, None)},
    "api/v1/mcp-servers": {"GET": (OWN, None), "POST": ({400}, None)},
    "api/v1/mcp-servers/<slug:server_id>": {"GET": (GONE, None), "PATCH": (GONE, None), "DELETE": (GONE, None)},
    "api/v1/mcp-servers/<slug:server_id>/refresh": {"POST": (GONE, None)},
    "api/v1/tools": {"GET": (OWN, None)},
    "api/v1/knowledge-bases": {"GET": (OWN, None), "POST": (REFUSED_REFERENCE, "kb")},
    "api/v1/knowledge-bases/<slug:kb_id>": {"GET": (GONE, None), "PATCH": (GONE, None), "DELETE": (GONE, None)},
    "api/v1/knowledge-bases/<slug:kb_id>/search": {"POST": (GONE, None)},
    "api/v1/knowledge-bases/<slug:kb_id>/documents": {"GET": (GONE, None), "POST": (GONE | {400, 415}, None)},
    "api/v1/knowledge-bases/<slug:kb_id>/documents/<uuid:document_id>": {
        "GET": Attempt(GONE, mixed_parent=True),
        "DELETE": Attempt(GONE, mixed_parent=True),
    },
    "api/v1/schedules": {"GET": (OWN, None), "POST": (REFUSED_REFERENCE, "schedule_bot")},
    "api/v1/schedules/<slug:schedule_id>": {"GET": (GONE, None), "PATCH": (GONE, None), "DELETE": (GONE, None)},
    "api/v1/webhooks": {"GET": (OWN, None), "POST": (REFUSED_REFERENCE, "webhook")},
    "api/v1/webhooks/<str:webhook_id>": {"GET": (GONE, None), "PATCH": (GONE, None), "DELETE": (GONE, None)},
    "api/v1/webhooks/<str:webhook_id>/rotate-secret": {"POST": (GONE, None)},
    "api/v1/webhooks/<str:webhook_id>/deliveries": {"GET": (GONE, None)},
    "api/v1/webhooks/<str:webhook_id>/deliveries/<str:delivery_id>/redeliver": {
        "POST": Attempt(GONE, mixed_parent=True)
    },
    # No workspace objects behind these: the schema, its docs page, the health check.
    "api/schema/": {"GET": (OWN, None)},
    "api/docs/": {"GET": (OWN, None)},
    "healthz": {"GET": ({200, 503}, None)},
    # Host-wide counters: a metrics token or a superuser session, never a workspace's key or staff.
    "metrics": {"GET": ({401, 403, 404}, None)},
    # The debug chat: the caller's own session and bindings.
    "chat/": {"GET": (OWN | {302}, None)},
    "chat/targets/": {"GET": (OWN | {302, 401, 403}, None)},
    "chat/login/": {"GET": (OWN, None)},
    "chat/logout/": {"POST": (OWN | {302}, None)},
    # A binding's try-it ticket: a key is no staff (403); their binding is none of the staff member's (404).
    "chat/try/<int:binding_pk>/ticket": {"POST": ({403, 404}, None)},
    # The home page (links to chat, admin, docs) and the favicon redirect: nothing of any workspace.
    "": {"GET": (OWN | {302}, None)},
    "favicon.ico": {method: ({301, 302}, None) for method in ("GET", "POST", "PUT", "PATCH", "DELETE")},
    # The language switch (a cookie of the caller's own) and the chat's translated strings.
    "i18n/setlang/": {"POST": ({204, 302}, None)},
    "jsi18n/": {"GET": (OWN, None)},
    # Their bot under my workspace's slug is no bot of mine.
    "platforms/<str:platform>/<slug:workspace_slug>/<slug:bot_id>/webhook": {"POST": (GONE, None)},
    # The website chat widget, public by design: its script (nothing of any workspace) and a visitor session,
    # which needs a page of an origin their web bot allows (none here: 403), their Telegram bot has no widget (404).
    "widget.js": {"GET": (OWN, None)},
    "widget/<str:widget_id>/session": {"POST": ({403, 404}, None)},
}
EXTRA_ATTEMPTS: list[tuple[str, str, str]] = [
    # The other reference a schedule can make.
    ("api/v1/schedules", "POST", "schedule_binding"),
]
# My own objects changed to refer to theirs: refused like a create naming theirs.
OWN_OBJECT_REFERENCES: list[tuple[str, str]] = [
    ("api/v1/bindings/<slug:binding_id>", "binding"),
    ("api/v1/models/<slug:model_id>", "model"),
    ("api/v1/knowledge-bases/<slug:kb_id>", "kb"),
    ("api/v1/schedules/<slug:schedule_id>", "schedule_bot"),
    ("api/v1/schedules/<slug:schedule_id>", "schedule_binding"),
    ("api/v1/webhooks/<str:webhook_id>", "webhook"),
    ("api/v1/budgets/<str:budget_id>", "budget"),
]


def served_routes() -> dict[str, set[str]]:
    """Every non-admin URL pattern → the methods its view implements (empty when the view is a function)."""

    def walk(patterns: list[Any], prefix: str = "") -> Any:
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                yield from walk(pattern.url_patterns, prefix + str(pattern.pattern))
            elif isinstance(pattern, URLPattern):
                yield prefix + str(pattern.pattern), pattern.callback

    served: dict[str, set[str]] = {}
    for route, callback in walk(get_resolver().url_patterns):
        if route.startswith(("admin/", "static/")):
            continue
        view = getattr(callback, "cls", None) or getattr(callback, "view_class", None)
        methods = {m.upper() for m in ("get", "post", "put", "patch", "delete") if hasattr(view, m)} if view else set()
        served[route] = methods
    return served


def test_every_route_and_method_is_in_the_matrix():
    served = served_routes()

    assert sorted(set(served) - set(ROUTES)) == [], "routes missing from ROUTES: add each with its refusal"
    assert sorted(set(ROUTES) - set(served)) == [], "ROUTES lists routes that no longer exist"
    for route, methods in served.items():
        if methods and route not in {"chat/login/", "chat/logout/"}:
            assert methods == set(ROUTES[route]), f"{route}: served {sorted(methods)}, listed {sorted(ROUTES[route])}"


def _path(route: str, ids: dict[str, str]) -> str:
    def fill(match: re.Match[str]) -> str:
        name = match.group(1)
        return "telegram" if name == "platform" else ids[name]

    return "/" + re.sub(r"<(?:\w+:)?(\w+)>", fill, route)


def _attempts(
    ids: dict[str, str], own_parents: dict[str, str], own: dict[str, str]
) -> list[tuple[str, str, str, set[int], Any]]:
    refs = _refs(ids)
    tries: list[tuple[str, str, str, set[int], Any]] = []
    for route, methods in ROUTES.items():
        for method, spec in methods.items():
            attempt = spec if isinstance(spec, Attempt) else Attempt(spec[0], refs[spec[1]] if spec[1] else None)
            tries.append((route, method, _path(route, ids), attempt.expected, attempt.body))
            if attempt.mixed_parent:
                tries.append((route, method, _path(route, {**ids, **own_parents}), attempt.expected, attempt.body))
    for route, method, ref in EXTRA_ATTEMPTS:
        tries.append((route, method, _path(route, ids), REFUSED_REFERENCE, refs[ref]))
    for route, ref in OWN_OBJECT_REFERENCES:
        body = {key: value for key, value in refs[ref].items() if key not in {"cron", "url", "event_types"}}
        tries.append((route, "PATCH", _path(route, {**ids, **own}), REFUSED_REFERENCE, body))
    # Logging out ends the staff member's session: last.
    return sorted(tries, key=lambda attempt: attempt[0] == "chat/logout/")


@pytest.mark.parametrize("caller", ["api key", "staff session"])
def test_no_route_reaches_another_workspaces_objects(
    caller: str, theirs: Theirs, mine: Mine, settings: Any, runtime_unreachable: None
) -> None:
    settings.LANGBOT_API_THROTTLE_RATE = "off"
    kb = KnowledgeBase.objects.create(workspace=mine.workspace, kb_id="mine-kb", name="mine")
    webhook = WebhookEndpoint.objects.create(
        workspace=mine.workspace, url="https://example.com/mine", event_types=["run.completed"], secret="whsec_x"
    )
    own_parents = {"kb_id": kb.kb_id, "webhook_id": str(webhook.webhook_id), "workspace_slug": mine.workspace.slug}
    own = _own_objects(mine, kb=kb, webhook=webhook)
    client = APIClient()
    if caller == "api key":
        _, key = api_key_create(workspace=mine.workspace)
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    else:
        client.force_login(mine.staff)
    # The platform webhook route: their bot under my workspace's slug.
    ids = {**theirs.ids, "workspace_slug": mine.workspace.slug}
    ids["widget_id"] = widget_public_id(Bot.objects.get(workspace=theirs.workspace, bot_id=theirs.ids["bot_id"]))
    before = snapshot(theirs.workspace)

    wrong: list[str] = []
    for _route, method, path, expected, body in _attempts(ids, own_parents, own):
        response = client.generic(method, path, data=_json(body), content_type="application/json")
        # The ids the caller sent may be echoed (`No bot 'x' in this workspace.`); anything else of theirs not.
        text = _text(response)
        for sent in sorted(ids.values(), key=len, reverse=True):
            if sent in path or sent in _json(body):
                text = text.replace(sent, "")
        if response.status_code not in expected:
            wrong.append(f"{method} {path}: {response.status_code} (expected {sorted(expected)}) {text[:200]}")
        elif MARKER in text:
            wrong.append(f"{method} {path}: the answer shows their objects: {text[:300]}")

    assert wrong == [], "\n".join(wrong)
    assert snapshot(theirs.workspace) == before
    assert _references_to_theirs(mine) == []


def _own_objects(mine: Mine, *, kb: KnowledgeBase, webhook: WebhookEndpoint) -> dict[str, str]:
    binding = AgentBindingFactory.create(workspace=mine.workspace, binding_id="mine-binding")
    provider = ModelProviderFactory.create(workspace=mine.workspace, provider_id="mine-provider")
    model = ModelFactory.create(workspace=mine.workspace, provider=provider, model_id="mine-model")
    schedule = Schedule.objects.create(workspace=mine.workspace, schedule_id="mine-schedule", cron="0 9 * * *")
    budget = Budget.objects.create(workspace=mine.workspace, amount=1)
    return {
        "binding_id": binding.binding_id, "model_id": model.model_id, "kb_id": kb.kb_id,
        "schedule_id": schedule.schedule_id, "webhook_id": str(webhook.webhook_id),
        "budget_id": str(budget.budget_id),
    }  # fmt: skip


def _references_to_theirs(mine: Mine) -> list[str]:
    """Foreign keys from my workspace's rows to another workspace's rows."""
    found = []
    for model in apps.get_models():
        if "workspace" not in {f.name for f in model._meta.get_fields()}:
            continue
        for field in model._meta.get_fields():
            if not (field.many_to_one and field.concrete) or field.name == "workspace":
                continue
            related = field.related_model
            if related is None or "workspace" not in {f.name for f in related._meta.get_fields()}:  # type: ignore[union-attr]
                continue
            crossing = (
                model._default_manager.filter(workspace=mine.workspace)
                .exclude(**{f"{field.name}__isnull": True})
                .exclude(**{f"{field.name}__workspace": mine.workspace})
            )
            found += [f"{model._meta.label}.{field.name} of {row.pk}" for row in crossing]
    return found


def _json(body: Any) -> str:
    import json

    return json.dumps(body) if body is not None else ""


def _text(response: Any) -> str:
    if getattr(response, "streaming", False):
        return b"".join(response.streaming_content).decode(errors="replace")
    return response.content.decode(errors="replace")
