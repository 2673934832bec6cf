"""The binding form's group behaviour: answering every group message, rate limits per sender and per chat
with their reply, and how group replies point at their message — controls of the Trigger and Delivery
sections that save into the policies and show them again."""

from __future__ import annotations

import pytest
from django.test import Client

from bindings.models import AgentBinding
from tests.bindings.test_admin import ADD_URL, _errors, form_data
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client(db) -> Client:
    client = Client()
    client.force_login(UserFactory.create(username="root", is_staff=True, is_superuser=True))
    return client


def test_group_behaviour_is_saved_from_its_controls_and_shown_again(admin_client, workspace, runner):
    saved = admin_client.post(
        ADD_URL,
        form_data(
            workspace,
            runner,
            trigger_policy__group_always="on",
            trigger_policy__rate_limit_per_user="5/60",
            trigger_policy__rate_limit_per_chat=" 20 / 3600 ",
            trigger_policy__rate_limit_reply="Slow down, please.",
            delivery_policy__group_reply="mention",
        ),
    )

    assert saved.status_code == 302, _errors(saved)
    binding = AgentBinding.objects.get()
    assert binding.trigger_policy["group_always"] is True
    assert binding.trigger_policy["rate_limit_per_user"] == {"messages": 5, "seconds": 60}
    assert binding.trigger_policy["rate_limit_per_chat"] == {"messages": 20, "seconds": 3600}
    assert binding.trigger_policy["rate_limit_reply"] == "Slow down, please."
    assert binding.delivery_policy["group_reply"] == "mention"
    page = admin_client.get(f"/admin/bindings/agentbinding/{binding.pk}/change/").content.decode()
    trigger = page[page.index('fieldset-heading">Trigger<') : page.index('fieldset-heading">Runner<')]
    assert 'name="trigger_policy__group_always"' in trigger
    assert 'value="5/60"' in trigger
    assert 'value="20/3600"' in trigger
    assert 'value="mention" selected' in page


def test_a_binding_without_limits_saves_none_and_quotes_in_groups(admin_client, workspace, runner):
    saved = admin_client.post(ADD_URL, form_data(workspace, runner))

    assert saved.status_code == 302, _errors(saved)
    binding = AgentBinding.objects.get()
    assert binding.trigger_policy["rate_limit_per_user"] is None
    assert binding.trigger_policy["group_always"] is False
    assert binding.delivery_policy["group_reply"] == "quote"


@pytest.mark.parametrize(
    ("written", "message"),
    [
        ("five a minute", "Write it as messages/seconds, like 5/60."),
        ("0/60", "greater than or equal to 1"),
        ("5/100000", "less than or equal to 86400"),
    ],
)
def test_a_rate_limit_out_of_form_or_bounds_is_refused_at_its_control(
    admin_client, workspace, runner, written, message
):
    refused = admin_client.post(ADD_URL, form_data(workspace, runner, trigger_policy__rate_limit_per_user=written))

    assert refused.status_code == 200
    errors = _errors(refused)
    assert any(message in error for error in errors["trigger_policy__rate_limit_per_user"]), errors
    assert not AgentBinding.objects.exists()
