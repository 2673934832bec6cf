"""Workspace roles and API-key scopes as a matrix (issue 31, item 6): every REST route the URL resolver serves is
classified here with the scope each method uses, and tried by a member of every role and by a narrowed key —
allowed, or refused 403 `forbidden` naming the scope; every workspace admin page is tried by every role. A route
the project serves that ROUTE_SCOPES does not list fails the test: a new endpoint is classified here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import pytest
from django.contrib import admin
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from bindings.models import ApiKey, WorkspaceMembership
from bindings.roles import ADMIN_SCOPES, ROLE_ORDER, SCOPES, role_reaches, scope_least_role, view_scope
from bindings.services import api_key_create, workspace_member_add
from tests.factories import UserFactory, WorkspaceFactory
from tests.security.conftest import Theirs, grant_permissions
from tests.security.test_bola_admin import SCOPED
from tests.security.test_bola_rest import served_routes

pytestmark = pytest.mark.django_db

_R, _W = "read", "write"


def _crud(area: str, *, detail: bool) -> dict[str, str]:
    if detail:
        return {"GET": f"{area}:read", "PATCH": f"{area}:write", "DELETE": f"{area}:write"}
    return {"GET": f"{area}:read", "POST": f"{area}:write"}


ROUTE_SCOPES: dict[str, Mapping[str, str | None]] = {
    "api/v1/events": {"POST": "events:write"},
    "api/v1/events/<str:event_id>": {"GET": "events:read"},
    "api/v1/runners": {"GET": "runners:read"},
    "api/v1/runners/refresh": {"POST": "runners:write"},
    "api/v1/runs": {"GET": "runs:read"},
    "api/v1/runs/<str:run_id>": {"GET": "runs:read"},
    "api/v1/runs/<str:run_id>/events": {"GET": "runs:read"},
    "api/v1/runs/<str:run_id>/cancel": {"POST": "runs:write"},
    "api/v1/ws-tickets": {"POST": "events:write"},
    "api/v1/budgets": _crud("budgets", detail=False),
    "api/v1/budgets/<str:budget_id>": _crud("budgets", detail=True),
    "api/v1/costs": {"GET": "budgets:read"},
    "api/v1/actions": {"GET": "actions:read"},
    "api/v1/actions/<str:action_id>": {"GET": "actions:read"},
    "api/v1/actions/<str:action_id>/approve": {"POST": "actions:write"},
    "api/v1/actions/<str:action_id>/reject": {"POST": "actions:write"},
    "api/v1/bindings": _crud("bindings", detail=False),
    "api/v1/bindings/<slug:binding_id>": _crud("bindings", detail=True),
    "api/v1/bots": _crud("bots", detail=False),
    "api/v1/bots/<slug:bot_id>": _crud("bots", detail=True),
    "api/v1/members": _crud("members", detail=False),
    "api/v1/members/<str:username>": _crud("members", detail=True),
    "api/v1/membership": {"GET": None, "DELETE": None},
    "api/v1/conversations/<path:conversation_id>/transcript": {"GET": "conversations:read"},
    "api/v1/conversations/<path:conversation_id>/takeover": {"POST": "conversations:write"},
    "api/v1/conversations/<path:conversation_id>/release": {"POST": "conversations:write"},
    "api/v1/conversations/<path:conversation_id>/messages": {"POST": "conversations:write"},
    "api/v1/handoffs": {"GET": "conversations:read"},
    "api/v1/alerts": {"GET": "runs:read"},
    "api/v1/artifacts": {"POST": "artifacts:write"},
    "api/v1/artifacts/<str:artifact_id>": {"GET": "artifacts:read"},
    "api/v1/artifacts/<str:artifact_id>/content": {"GET": "artifacts:read"},
    "api/v1/model-providers": _crud("resources", detail=False),
    "api/v1/model-providers/<slug:provider_id>": _crud("resources", detail=True),
    "api/v1/models": _crud("resources", detail=False),
    "api/v1/models/<slug:model_id>": _crud("resources", detail=True),
    "api/v1/mcp-servers": _crud("resources", detail=False),
    "api/v1/mcp-servers/<slug:server_id>": _crud("resources", detail=True),
    "api/v1/mcp-servers/<slug:server_id>/refresh": {"POST": "resources:write"},
    "api/v1/tools": {"GET": "resources:read"},
    "api/v1/knowledge-bases": _crud("knowledge", detail=False),
    "api/v1/knowledge-bases/<slug:kb_id>": _crud("knowledge", detail=True),
    "api/v1/knowledge-bases/<slug:kb_id>/documents": _crud("knowledge", detail=False),
    "api/v1/knowledge-bases/<slug:kb_id>/search": {"POST": "knowledge:read"},  # a hit test reads
    "api/v1/persons": {"GET": "persons:read"},
    "api/v1/persons/<str:person_id>": {"GET": "persons:read"},
    "api/v1/persons/<str:person_id>/export": {"GET": "persons:write"},  # all of a person's data at once
    "api/v1/persons/<str:person_id>/erase": {"POST": "persons:write"},
    "api/v1/knowledge-bases/<slug:kb_id>/documents/<uuid:document_id>": {
        "GET": "knowledge:read",
        "DELETE": "knowledge:write",
    },
    "api/v1/schedules": _crud("schedules", detail=False),
    "api/v1/schedules/<slug:schedule_id>": _crud("schedules", detail=True),
    "api/v1/webhooks": _crud("webhooks", detail=False),
    "api/v1/webhooks/<str:webhook_id>": _crud("webhooks", detail=True),
    "api/v1/webhooks/<str:webhook_id>/rotate-secret": {"POST": "webhooks:write"},
    "api/v1/webhooks/<str:webhook_id>/deliveries": {"GET": "webhooks:read"},
    "api/v1/webhooks/<str:webhook_id>/deliveries/<str:delivery_id>/redeliver": {"POST": "webhooks:write"},
}
"""Route → method → the scope it uses (None: any member of the workspace or key of it)."""

OUTSIDE_ROLES: dict[str, str] = {
    "api/v1/runs/<str:run_id>/stream": "the SSE stream: a plain view that checks `runs:read` itself (tested below)",
    "api/schema/": "the API's description", "api/docs/": "its docs page", "healthz": "the health check",
    "metrics": "host-wide counters, a metrics token or a superuser", "": "the home page",
    "favicon.ico": "a redirect", "chat/": "the debug chat page (its socket's ticket is `events:write`)",
    "chat/targets/": "the chat's bindings", "chat/login/": "signing in", "chat/logout/": "signing out",
    "chat/try/<int:binding_pk>/ticket": "a binding's try-it ticket: staff the admin lets change the binding",
    "i18n/setlang/": "the language cookie", "jsi18n/": "translated strings",
    "platforms/<str:platform>/<slug:workspace_slug>/<slug:bot_id>/webhook": "platforms, with their own signatures",
    "widget.js": "the website chat widget's script, public", "widget/<str:widget_id>/session":
    "a website visitor's session: public, for the origins the web bot allows (webchat.widget_views)",
}  # fmt: skip
"""Routes the role check does not stand in front of, and why."""


def _view_of(route: str) -> Any:
    from django.urls import URLPattern, URLResolver, get_resolver

    def walk(patterns: list[Any], prefix: str = "") -> Any:
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                yield from walk(pattern.url_patterns, prefix + str(pattern.pattern))
            elif isinstance(pattern, URLPattern):
                yield prefix + str(pattern.pattern), pattern.callback

    return next(getattr(cb, "cls", None) for r, cb in walk(get_resolver().url_patterns) if r == route)


def test_every_route_is_classified_and_every_view_declares_its_scopes():
    served = served_routes()

    assert sorted(set(served) - set(ROUTE_SCOPES) - set(OUTSIDE_ROLES)) == [], "classify each new route here"
    assert sorted((set(ROUTE_SCOPES) | set(OUTSIDE_ROLES)) - set(served)) == [], "routes listed that are gone"
    wrong = []
    for route, methods in ROUTE_SCOPES.items():
        assert set(methods) == served[route], f"{route}: served {sorted(served[route])}, listed {sorted(methods)}"
        view = _view_of(route)
        for method, scope in methods.items():
            declared, used = view_scope(view, method)
            if not declared or used != scope:
                wrong.append(f"{route} {method}: the view's required_scopes says {used!r}, expected {scope!r}")
            assert scope is None or scope in SCOPES
    assert wrong == [], "\n".join(wrong)


def _path(route: str) -> str:
    return "/" + re.sub(r"<(?:(\w+):)?(\w+)>", lambda m: str(_UUID) if m.group(1) == "uuid" else "nope", route)


_UUID = "00000000-0000-0000-0000-000000000001"


def _role_refusal(response: Any) -> str | None:
    """The scope a 403 `forbidden` of the role check names, or None when the answer is anything else."""
    if response.status_code != 403:
        return None
    error = response.json().get("error", {})
    return error.get("details", {}).get("required_scope") if error.get("code") == "forbidden" else None


def _tries(client: APIClient) -> list[tuple[str, str, str | None, str | None]]:
    """(route, method, scope it uses, the scope a refusal named) for every classified route and method."""
    results = []
    for route, methods in ROUTE_SCOPES.items():
        for method, scope in methods.items():
            if route == "api/v1/membership" and method == "DELETE":
                continue  # leaving: tried in the membership tests, it would end the member's session here
            response = client.generic(method, _path(route), data="{}", content_type="application/json")
            results.append((route, method, scope, _role_refusal(response)))
    return results


@pytest.mark.parametrize("role", ROLE_ORDER)
def test_each_role_reaches_exactly_the_routes_its_rank_allows(role, settings, runtime_unreachable):
    settings.LANGBOT_API_THROTTLE_RATE = "off"
    workspace = WorkspaceFactory.create(slug="roles")
    user = UserFactory.create(username=f"a-{role}")
    workspace_member_add(workspace=workspace, user=user, role=role)
    client = APIClient()
    client.force_login(user)

    wrong = []
    for route, method, scope, refused in _tries(client):
        # The runner catalog's refresh is host-wide: the operator check decides for sessions, not the role.
        allowed = scope is None or route == "api/v1/runners/refresh" or role_reaches(role, scope_least_role(scope))
        if allowed and refused == scope and scope is not None:
            wrong.append(f"{role}: {method} {route} refused, its role reaches {scope}")
        if not allowed and refused != scope:
            wrong.append(f"{role}: {method} {route} not refused for {scope} (refusal named {refused!r})")
    assert wrong == [], "\n".join(wrong)


def test_a_narrowed_key_reaches_only_its_scopes_and_a_key_without_scopes_everything(settings, runtime_unreachable):
    settings.LANGBOT_API_THROTTLE_RATE = "off"
    workspace = WorkspaceFactory.create(slug="keys")
    _, narrow = api_key_create(workspace=workspace, scopes=["events:write", "runs:read"])
    _, full = api_key_create(workspace=workspace)
    narrow_client, full_client = APIClient(), APIClient()
    narrow_client.credentials(HTTP_AUTHORIZATION=f"Bearer {narrow}")
    full_client.credentials(HTTP_AUTHORIZATION=f"Bearer {full}")

    narrow_wrong = [
        f"{method} {route}: refusal named {refused!r}"
        for route, method, scope, refused in _tries(narrow_client)
        if (refused is not None and refused == scope)
        != (scope is not None and scope not in {"events:write", "runs:read"})
    ]
    full_refused = [f"{m} {r}" for r, m, scope, refused in _tries(full_client) if refused and refused == scope]

    assert narrow_wrong == []
    assert full_refused == []


def test_a_key_without_the_scope_is_told_which_one_it_lacks(workspace):
    _, key = api_key_create(workspace=workspace, scopes=["events:write", "runs:read"])
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")

    response = client.post("/api/v1/bindings", {}, format="json")

    assert response.status_code == 403
    assert response.json()["error"]["code"] == "forbidden"
    assert "bindings:write" in response.json()["error"]["message"]
    assert response.json()["error"]["details"]["required_scope"] == "bindings:write"


def test_the_run_stream_refuses_a_key_without_runs_read(workspace):
    _, key = api_key_create(workspace=workspace, scopes=["events:write"])

    response = Client().get(f"/api/v1/runs/{_UUID}/stream", HTTP_AUTHORIZATION=f"Bearer {key}")

    assert response.status_code == 403
    assert response.json()["error"]["details"] == {"required_scope": "runs:read"}


def test_create_api_key_makes_a_scoped_key_and_refuses_unknown_scopes(capsys):
    call_command("create_api_key", "--workspace", "ops", "--scopes", "events:write,runs:read")
    call_command("create_api_key", "--workspace", "ops")
    with pytest.raises(CommandError, match="bindings:delete"):
        call_command("create_api_key", "--workspace", "ops", "--scopes", "bindings:delete")

    assert list(ApiKey.objects.order_by("pk").values_list("scopes", flat=True)) == [["events:write", "runs:read"], []]


# --- members -----------------------------------------------------------------------------------------


def _member(workspace: Any, name: str, role: str) -> APIClient:
    user = UserFactory.create(username=name)
    workspace_member_add(workspace=workspace, user=user, role=role)
    client = APIClient()
    client.force_login(user)
    return client


def test_owners_and_admins_manage_members_within_the_owner_rules(workspace):
    owner = _member(workspace, "olive", "owner")
    admin_client = _member(workspace, "adam", "admin")
    viewer = _member(workspace, "vera", "viewer")
    UserFactory.create(username="newcomer")

    assert viewer.post("/api/v1/members", {"username": "newcomer"}, format="json").status_code == 403
    added = admin_client.post("/api/v1/members", {"username": "newcomer", "role": "developer"}, format="json")
    assert added.status_code == 201
    assert added.json() == {"username": "newcomer", "role": "developer"}
    # An admin neither grants the owner role nor touches an owner.
    assert admin_client.patch("/api/v1/members/vera", {"role": "owner"}, format="json").status_code == 403
    assert admin_client.patch("/api/v1/members/olive", {"role": "viewer"}, format="json").status_code == 403
    assert admin_client.delete("/api/v1/members/olive").status_code == 403
    assert admin_client.patch("/api/v1/members/vera", {"role": "operator"}, format="json").json()["role"] == "operator"
    # The last owner neither steps down nor leaves; once another is owner, they may.
    assert owner.patch("/api/v1/members/olive", {"role": "admin"}, format="json").json()["error"]["code"] == (
        "members.last_owner"
    )
    assert owner.delete("/api/v1/membership").status_code == 409
    assert owner.patch("/api/v1/members/adam", {"role": "owner"}, format="json").status_code == 200
    assert owner.delete("/api/v1/membership").status_code == 204

    roles = dict(WorkspaceMembership.objects.filter(workspace=workspace).values_list("user__username", "role"))
    assert roles == {"adam": "owner", "vera": "operator", "newcomer": "developer"}


def test_membership_says_what_the_caller_may_do(workspace):
    viewer = _member(workspace, "vera", "viewer")
    _, key = api_key_create(workspace=workspace, scopes=["runs:read"])
    key_client = APIClient()
    key_client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")

    mine = viewer.get("/api/v1/membership").json()
    assert mine["role"] == "viewer"
    assert "runs:read" in mine["scopes"]
    assert "runs:write" not in mine["scopes"]
    assert key_client.get("/api/v1/membership").json()["scopes"] == ["runs:read"]
    assert key_client.delete("/api/v1/membership").status_code == 403


def test_the_schema_shows_each_operations_scope(client):
    schema = APIClient().get("/api/schema/", {"format": "json"}).json()

    assert schema["paths"]["/api/v1/bindings"]["post"]["x-required-scope"] == "bindings:write"
    assert schema["paths"]["/api/v1/bindings"]["post"]["x-least-role"] == "developer"
    assert schema["paths"]["/api/v1/runs/{run_id}/stream"]["get"]["x-required-scope"] == "runs:read"


# --- the admin ---------------------------------------------------------------------------------------


def _page(label: str, page: str, *args: Any) -> str:
    app_label, model = label.lower().split(".")
    return reverse(f"admin:{app_label}_{model}_{page}", args=args)


def test_every_workspace_admin_names_its_scopes():
    assert sorted(set(SCOPED) - set(ADMIN_SCOPES)) == [], "name the scopes of each workspace admin in ADMIN_SCOPES"
    registered = {model._meta.label for model in admin.site._registry}
    assert sorted(set(ADMIN_SCOPES) - registered) == []


@pytest.mark.parametrize("role", ROLE_ORDER)
def test_each_role_sees_and_changes_exactly_the_admin_pages_its_rank_allows(role, theirs: Theirs):
    """The staff member holds every model permission; the role alone narrows what they reach. The owner's
    answers are the baseline: a page an owner cannot open (a read-only model's add form) no role opens."""
    owner = UserFactory.create(username="owner-staff", is_staff=True)
    member = UserFactory.create(username=f"{role}-staff", is_staff=True)
    for user, user_role in ((owner, "owner"), (member, role)):
        grant_permissions(user, SCOPED)
        workspace_member_add(workspace=theirs.workspace, user=user, role=user_role)
    owner_client, member_client = Client(), Client()
    owner_client.force_login(owner)
    member_client.force_login(member)

    wrong = []
    for label in SCOPED:
        if label not in theirs.objects:
            continue
        read, write = (scope_least_role(s) for s in ADMIN_SCOPES[label])
        pk = theirs.objects[label].pk
        for what, url, least in (
            ("list", _page(label, "changelist"), read),
            ("add", _page(label, "add"), write),
            ("change page", _page(label, "change", pk), read),
        ):
            baseline = owner_client.get(url).status_code
            got = member_client.get(url).status_code
            expected_open = baseline == 200 and role_reaches(role, least)
            if (got == 200) != expected_open:
                wrong.append(f"{role} {label} {what}: {got} (owner {baseline}, needs {least})")
        if admin.site._registry[type(theirs.objects[label])].has_change_permission(
            _request(owner), theirs.objects[label]
        ):
            can_change = admin.site._registry[type(theirs.objects[label])].has_change_permission(
                _request(member), theirs.objects[label]
            )
            if can_change != role_reaches(role, write):
                wrong.append(f"{role} {label}: may change {can_change}, needs {write}")
    assert wrong == [], "\n".join(wrong)


def _request(user: Any) -> Any:
    from django.test import RequestFactory

    request = RequestFactory().get("/admin/")
    request.user = user
    return request


def test_only_an_owner_makes_or_unmakes_an_owner_in_the_admin(workspace):
    owner = UserFactory.create(username="olive", is_staff=True)
    admin_user = UserFactory.create(username="adam", is_staff=True)
    grant_permissions(admin_user, ["bindings.Workspace", "bindings.WorkspaceMembership"])
    owner_row = workspace_member_add(workspace=workspace, user=owner, role="owner")
    admin_row = workspace_member_add(workspace=workspace, user=admin_user, role="admin")
    client = Client()
    client.force_login(admin_user)
    form = {
        "slug": workspace.slug, "name": workspace.name,
        "memberships-TOTAL_FORMS": "2", "memberships-INITIAL_FORMS": "2",
        "memberships-MIN_NUM_FORMS": "0", "memberships-MAX_NUM_FORMS": "1000",
        "memberships-0-id": owner_row.pk, "memberships-0-workspace": workspace.pk, "memberships-0-user": owner.pk,
        "memberships-0-role": "viewer",
        "memberships-1-id": admin_row.pk, "memberships-1-workspace": workspace.pk, "memberships-1-user": admin_user.pk,
        "memberships-1-role": "owner",
    }  # fmt: skip

    response = client.post(_page("bindings.Workspace", "change", workspace.pk), form)

    assert response.status_code == 200  # the form again, with the refusal
    assert "Only an owner" in response.content.decode()
    owner_row.refresh_from_db()
    admin_row.refresh_from_db()
    assert (owner_row.role, admin_row.role) == ("owner", "admin")
