"""A model's prices per million tokens, through REST and the admin: optional decimals, answered as decimal
strings, settable to null, never negative."""

from __future__ import annotations

from decimal import Decimal

import pytest

from resources.models import Model
from tests.factories import ModelFactory, ModelProviderFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def provider(workspace):
    return ModelProviderFactory.create(workspace=workspace, provider_id="openai")


def test_a_model_is_created_with_prices_and_answers_them_as_decimal_strings(api_client, provider):
    body = {
        "provider_id": "openai",
        "name": "gpt-4o-mini",
        "kind": "llm",
        "input_price_per_million": "0.15",
        "output_price_per_million": 0.6,
    }

    created = api_client.post("/api/v1/models", body, format="json").json()

    assert (created["input_price_per_million"], created["output_price_per_million"]) == ("0.15", "0.6")
    stored = Model.objects.get(model_id="gpt-4o-mini")
    assert stored.input_price_per_million == Decimal("0.15")


def test_a_model_without_prices_is_not_priced_and_a_price_can_be_removed(api_client, provider):
    ModelFactory.create(provider=provider, model_id="m", input_price_per_million=Decimal(1))
    assert api_client.get("/api/v1/models/m").json()["output_price_per_million"] is None

    patched = api_client.patch("/api/v1/models/m", {"input_price_per_million": None}, format="json").json()

    assert patched["input_price_per_million"] is None


@pytest.mark.parametrize("price", ["-1", "abc", "0.0000001", True])
def test_a_negative_malformed_or_too_precise_price_is_a_field_error(api_client, provider, price):
    ModelFactory.create(provider=provider, model_id="m")

    response = api_client.patch("/api/v1/models/m", {"output_price_per_million": price}, format="json")

    assert response.status_code == 400
    assert "output_price_per_million" in response.json()["error"]["details"]["fields"]


def test_the_admin_edits_a_models_prices(admin_client, provider):
    model = ModelFactory.create(provider=provider, model_id="m", name="gpt")
    page = admin_client.get(f"/admin/resources/model/{model.pk}/change/")
    assert b"input_price_per_million" in page.content

    response = admin_client.post(
        f"/admin/resources/model/{model.pk}/change/",
        {"provider": provider.pk, "name": "gpt", "kind": "llm", "input_price_per_million": "2.5",
         "output_price_per_million": "10"},
    )  # fmt: skip

    assert response.status_code == 302, response.content[:2000]
    model.refresh_from_db()
    assert (model.input_price_per_million, model.output_price_per_million) == (Decimal("2.5"), Decimal(10))
