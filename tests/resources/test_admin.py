"""Admin of model providers and models: secrets stay masked, staff see only their workspaces, and "Test
connection" shows what a local OpenAI-compatible server answers."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from django.test import Client

from bindings.services import workspace_member_add
from foundation.crypto import SECRET_MASK
from resources.models import Model, ModelProvider
from tests.factories import ModelFactory, ModelProviderFactory, UserFactory, WorkspaceFactory
from tests.resources.conftest import GOOD_KEY

pytestmark = pytest.mark.django_db

PROVIDERS_URL = "/admin/resources/modelprovider/"
MODELS_URL = "/admin/resources/model/"


@pytest.fixture
def admin_client(db) -> Client:
    client = Client()
    client.force_login(UserFactory.create(username="root", is_staff=True, is_superuser=True))
    return client


def provider_form(workspace, **overrides):
    data = {
        "workspace": str(workspace.pk),
        "provider_id": "local",
        "name": "Local",
        "base_url": "http://127.0.0.1:8080/v1",
        "api_key_input": "sk-from-admin",
        "headers_input": '{"X-Org": "acme-secret"}',
        "timeout_seconds": "60",
        "max_retries": "2",
        "_save": "Save",
    }
    data.update(overrides)
    return data


def messages_of(response) -> list[str]:
    return [str(message) for message in response.context["messages"]]


def test_list_and_change_pages_render_with_the_key_masked(admin_client):
    provider = ModelProviderFactory.create(api_key="sk-never-shown", headers={"X-Org": "org-never-shown"})
    model = ModelFactory.create(provider=provider, model_id="main")

    pages = [
        admin_client.get(PROVIDERS_URL),
        admin_client.get(f"{PROVIDERS_URL}{provider.pk}/change/"),
        admin_client.get(f"{PROVIDERS_URL}add/"),
        admin_client.get(MODELS_URL),
        admin_client.get(f"{MODELS_URL}{model.pk}/change/"),
        admin_client.get(f"{MODELS_URL}add/"),
    ]

    assert [page.status_code for page in pages] == [200] * 6
    change = pages[1].content.decode()
    assert provider.provider_id in pages[0].content.decode()
    assert "main" in pages[3].content.decode()
    assert SECRET_MASK in change
    for page in pages:
        assert "sk-never-shown" not in page.content.decode()
        assert "org-never-shown" not in page.content.decode()


def test_a_provider_added_in_admin_is_stored_with_its_secrets(admin_client, workspace):
    response = admin_client.post(f"{PROVIDERS_URL}add/", provider_form(workspace))

    assert response.status_code == 302, response.context["adminform"].form.errors
    provider = ModelProvider.objects.get()
    assert (provider.api_key, provider.headers) == ("sk-from-admin", {"X-Org": "acme-secret"})


def test_saving_the_change_form_with_the_mask_keeps_the_key(admin_client):
    provider = ModelProviderFactory.create(api_key="sk-keep-me", headers={"X-Org": "keep"})
    form = provider_form(
        provider.workspace, api_key_input=SECRET_MASK, headers_input=f'{{"X-Org": "{SECRET_MASK}"}}', name="Renamed"
    )

    response = admin_client.post(f"{PROVIDERS_URL}{provider.pk}/change/", form)

    assert response.status_code == 302, response.context["adminform"].form.errors
    provider.refresh_from_db()
    assert (provider.name, provider.api_key, provider.headers) == ("Renamed", "sk-keep-me", {"X-Org": "keep"})


def test_a_base_url_that_is_not_http_is_shown_on_its_field(admin_client, workspace):
    response = admin_client.post(f"{PROVIDERS_URL}add/", provider_form(workspace, base_url="file:///etc/passwd"))

    assert response.status_code == 200
    assert "base_url" in response.context["adminform"].form.errors
    assert not ModelProvider.objects.exists()


def test_a_model_cannot_use_another_workspaces_provider(admin_client, workspace):
    theirs = ModelProviderFactory.create(workspace=WorkspaceFactory.create())
    data = {"workspace": str(workspace.pk), "model_id": "m", "provider": str(theirs.pk), "name": "m", "kind": "llm"}

    response = admin_client.post(f"{MODELS_URL}add/", {**data, "_save": "Save"})

    assert response.status_code == 200
    assert "provider" in response.context["adminform"].form.errors
    assert not Model.objects.exists()


def test_test_connection_lists_the_providers_models(admin_client, fake_openai):
    provider = ModelProviderFactory.create(
        provider_id="local", base_url=fake_openai.base_url, api_key=GOOD_KEY, headers={"X-Org": "acme"}
    )

    response = admin_client.post(
        PROVIDERS_URL, {"action": "test_connection", "_selected_action": [provider.pk]}, follow=True
    )

    assert messages_of(response) == ["local: connected; 1 model(s): m1"]
    assert fake_openai.requests[-1]["x-org"] == "acme"


def test_test_connection_shows_the_providers_error_without_the_key(admin_client, fake_openai):
    provider = ModelProviderFactory.create(provider_id="local", base_url=fake_openai.base_url, api_key="sk-wrong-key")

    response = admin_client.post(
        PROVIDERS_URL, {"action": "test_connection", "_selected_action": [provider.pk]}, follow=True
    )

    assert messages_of(response) == ["local: HTTP 401: Incorrect API key"]
    assert "sk-wrong-key" not in response.content.decode()
    assert len(fake_openai.requests) == 1  # tried once: no retries behind the operator's back


def test_a_key_the_provider_quotes_back_is_masked_in_the_message(admin_client, fake_openai):
    provider = ModelProviderFactory.create(provider_id="local", base_url=fake_openai.base_url, api_key="sk-echo-secret")

    response = admin_client.post(
        PROVIDERS_URL, {"action": "test_connection", "_selected_action": [provider.pk]}, follow=True
    )

    assert messages_of(response) == [f"local: HTTP 401: Incorrect API key provided: {SECRET_MASK}"]
    assert "sk-echo-secret" not in response.content.decode()


def test_test_connection_to_nothing_says_it_could_not_connect(admin_client):
    provider = ModelProviderFactory.create(provider_id="gone", base_url="http://127.0.0.1:9/v1", timeout_seconds=5)

    response = admin_client.post(
        PROVIDERS_URL, {"action": "test_connection", "_selected_action": [provider.pk]}, follow=True
    )

    [message] = messages_of(response)
    assert message.startswith("gone: Could not connect")


def test_staff_see_only_the_providers_and_models_of_their_workspaces(workspace):
    user = UserFactory.create(username="staff", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(content_type__app_label="resources"))
    workspace_member_add(workspace=workspace, user=user)
    mine = ModelProviderFactory.create(workspace=workspace, provider_id="mine")
    theirs = ModelProviderFactory.create(workspace=WorkspaceFactory.create(), provider_id="theirs")
    ModelFactory.create(provider=theirs, model_id="their-model")
    client = Client()
    client.force_login(user)

    providers = client.get(PROVIDERS_URL).content.decode()

    assert "mine" in providers
    assert "theirs" not in providers
    assert "their-model" not in client.get(MODELS_URL).content.decode()
    assert client.get(f"{PROVIDERS_URL}{theirs.pk}/change/").status_code == 302
    assert client.get(f"{PROVIDERS_URL}{mine.pk}/change/").status_code == 200
