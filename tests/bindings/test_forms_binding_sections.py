"""The binding form in sections: what an operator sees on the add page, and the primary model never
offered or accepted as its own fallback."""

from __future__ import annotations

import pytest
from django.test import Client

from bindings.models import AgentBinding
from resources.models import Model
from tests.bindings.test_admin import ADD_URL, _errors, form_data
from tests.factories import ModelFactory, ModelProviderFactory, UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client(db) -> Client:
    client = Client()
    client.force_login(UserFactory.create(username="root", is_staff=True, is_superuser=True))
    return client


@pytest.fixture
def models(workspace):
    provider = ModelProviderFactory.create(workspace=workspace, provider_id="openai", name="OpenAI")
    for model_id in ("gpt-a", "gpt-b"):
        ModelFactory.create(provider=provider, model_id=model_id, name=model_id, kind=Model.Kind.LLM)


def test_the_form_is_in_sections_in_the_order_of_setting_up(admin_client, workspace, runner):
    page = admin_client.get(f"{ADD_URL}?runner_id={runner.runner_id}&workspace={workspace.pk}").content.decode()

    headings = ["Trigger", "Runner", "Resources", "Context &amp; state", "Delivery &amp; concurrency", "Advanced"]
    positions = [page.index(f'fieldset-heading">{heading}<') for heading in headings]
    assert positions == sorted(positions)
    assert "Imported from LangBot" not in page  # nothing imported to show
    assert "bindings/binding_form.js" in page
    # The allowed models are checkboxes, not a list box to ctrl-click.
    assert 'type="checkbox" name="resource_policy__allowed_model_ids"' in page


def test_the_primary_model_is_not_offered_nor_taken_as_its_own_fallback(admin_client, workspace, runner, models):
    binding_page = admin_client.post(
        ADD_URL, form_data(workspace, runner, cfg__model="gpt-a", cfg__fallback_models=["gpt-a", "gpt-b"])
    )

    assert binding_page.status_code == 200
    assert _errors(binding_page)["cfg__fallback_models"] == [
        "gpt-a is the primary model; it cannot be its own fallback."
    ]
    assert not AgentBinding.objects.exists()
    saved = admin_client.post(ADD_URL, form_data(workspace, runner, cfg__model="gpt-a", cfg__fallback_models=["gpt-b"]))
    assert saved.status_code == 302, _errors(saved)
    binding = AgentBinding.objects.get()
    change = admin_client.get(f"/admin/bindings/agentbinding/{binding.pk}/change/").content.decode()
    fallback_select = change[change.index('name="cfg__fallback_models"') :].split("</select>")[0]
    assert 'value="gpt-b"' in fallback_select
    assert 'value="gpt-a"' not in fallback_select
    assert 'data-fallback-of="id_cfg__model"' in change
