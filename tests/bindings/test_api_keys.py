"""API keys: shown once, stored hashed, accepted as Bearer tokens, refused when wrong or revoked."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.utils import timezone
from rest_framework.test import APIClient

from bindings.models import ApiKey, Workspace

pytestmark = pytest.mark.django_db


def test_create_api_key_command_prints_only_the_key_and_creates_the_workspace(capsys):
    call_command("create_api_key", "--workspace", "acme")

    printed = capsys.readouterr().out.strip()
    assert printed.startswith("lbk_")
    assert "\n" not in printed
    stored = ApiKey.objects.get(workspace__slug="acme")
    assert printed.split("_")[2] not in (stored.secret_sha256, stored.prefix)
    assert Workspace.objects.filter(slug="acme").exists()


def test_a_printed_key_authenticates_api_calls(capsys):
    call_command("create_api_key", "--workspace", "acme")
    key = capsys.readouterr().out.strip()
    client = APIClient()

    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    response = client.get("/api/v1/runners")

    assert response.status_code == 200


@pytest.mark.parametrize("header", ["Bearer lbk_nope_nope", "Bearer garbage", "Bearer a b"])
def test_wrong_keys_get_a_json_401(header):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=header)

    response = client.get("/api/v1/runners")

    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unauthenticated"


def test_a_revoked_key_is_refused(workspace, api_client_for):
    client = api_client_for(workspace)
    ApiKey.objects.filter(workspace=workspace).update(revoked_at=timezone.now())

    response = client.get("/api/v1/runners")

    assert response.status_code == 401


def test_no_credentials_is_401_with_a_code():
    response = APIClient().get("/api/v1/runners")

    assert response.status_code == 401
    assert response.json() == {
        "error": {"code": "unauthenticated", "message": "Authentication credentials were not provided.", "details": {}}
    }
