"""`POST /api/v1/runners/refresh` acts for the whole host: operators only (an operator-scoped API key or a
staff session), everyone else 403 `forbidden`; and only superusers grant the operator scope."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from rest_framework.test import APIClient

from bindings.models import ApiKey
from bindings.services import api_key_create
from tests.conftest import PLUGINS_DIR
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def test_a_workspace_key_without_the_operator_scope_cannot_refresh_the_runner_catalog(api_client):
    response = api_client.post("/api/v1/runners/refresh")

    assert response.status_code == 403
    assert response.json()["error"]["code"] == "forbidden"
    assert response.json()["error"]["details"] == {"required_scope": "operator"}


def test_a_non_staff_session_cannot_refresh_the_runner_catalog(workspace):
    client = APIClient()
    client.force_login(UserFactory.create(is_staff=False))

    response = client.post("/api/v1/runners/refresh")

    assert response.status_code == 403
    assert response.json()["error"]["code"] == "forbidden"


@pytest.mark.parametrize("caller", ["operator key", "staff session"])
def test_operators_reach_the_runtime(caller, workspace, runtime_plugins, runtime_unreachable):
    runtime_plugins(PLUGINS_DIR)  # the call gets as far as the runtime, where nothing listens
    client = APIClient()
    if caller == "operator key":
        _, key = api_key_create(workspace=workspace, is_operator=True)
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    else:
        client.force_login(UserFactory.create(is_staff=True))

    response = client.post("/api/v1/runners/refresh")

    assert response.status_code == 503
    assert response.json()["error"]["code"] == "runtime.unavailable"


def test_create_api_key_grants_the_operator_scope_only_when_asked(capsys):
    call_command("create_api_key", "--workspace", "ops", "--operator")
    call_command("create_api_key", "--workspace", "ops")

    assert list(ApiKey.objects.order_by("pk").values_list("is_operator", flat=True)) == [True, False]


def test_only_a_superuser_may_change_a_keys_operator_scope_in_admin(workspace):
    from bindings.services import workspace_member_add

    key, _ = api_key_create(workspace=workspace)
    staff = UserFactory.create(is_staff=True, is_superuser=True)
    member = UserFactory.create(is_staff=True)
    workspace_member_add(workspace=workspace, user=member)
    url = f"/admin/bindings/apikey/{key.pk}/change/"
    form = {"name": "promoted", "is_operator": "on", "revoked_at_0": "", "revoked_at_1": ""}

    member_client = APIClient()
    member_client.force_login(_with_all_permissions(member))
    member_client.post(url, form)
    key.refresh_from_db()
    assert key.name == "promoted"  # the member's change was saved, the scope in it was not
    assert key.is_operator is False

    root = APIClient()
    root.force_login(staff)
    root.post(url, form)
    key.refresh_from_db()
    assert key.is_operator is True


def _with_all_permissions(user):
    from django.contrib.auth.models import Permission

    user.user_permissions.set(Permission.objects.all())
    return user
