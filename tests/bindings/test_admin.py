"""Admin: the binding form shows the chosen runner's config as real fields and refuses invalid config on
the offending field; secrets stay masked."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from bindings.models import AgentBinding, Bot
from bindings.services import binding_create, binding_runner_config_plain, workspace_member_add
from bindings.specs import BindingIn
from foundation.crypto import SECRET_MASK
from tests.factories import AgentBindingFactory, BotFactory, UserFactory, WorkspaceFactory

pytestmark = pytest.mark.django_db

ADD_URL = "/admin/bindings/agentbinding/add/"


@pytest.fixture
def admin_client(db) -> Client:
    client = Client()
    client.force_login(UserFactory.create(username="root", is_staff=True, is_superuser=True))
    return client


def form_data(workspace, runner, **overrides):
    data = {
        "binding_id": "from-admin",
        "name": "From admin",
        "workspace": str(workspace.pk),
        "enabled": "on",
        "scope_type": "workspace",
        "scope_id": "",
        "event_types": "message.received",
        "priority": "0",
        "runner_id": runner.runner_id,
        "cfg__greeting": "hello",
        "cfg__max_rounds": "5",
        "cfg__api_key": "sk-admin",
        "cfg__prompt": '[{"role": "system", "content": "be brief"}]',
        # The policy controls as a fresh add page posts them (the policies' defaults).
        "resource_policy__storage_areas": ["plugin", "binding"],
        "resource_policy__require_action_approval": "on",
        "state_policy__enable_state": "on",
        "state_policy__state_scopes": ["conversation", "actor", "subject", "runner", "binding"],
        "delivery_policy__enable_streaming": "on",
        "delivery_policy__enable_reply": "on",
        "trigger_policy__chat_types": ["private", "group"],
        "trigger_policy__group_mention": "on",
        "trigger_policy__strip_prefix": "on",
        "trigger_policy__access_mode": "deny",
        "concurrency_policy": "queue",
        "timeout_seconds": "300",
        "_save": "Save",
    }
    data.update(overrides)
    return data


def test_the_add_form_renders_one_field_per_config_item_of_the_chosen_runner(admin_client, runner):
    response = admin_client.get(f"{ADD_URL}?runner_id={runner.runner_id}")

    assert response.status_code == 200
    form = response.context["adminform"].form
    config_fields = sorted(name for name in form.fields if name.startswith("cfg__"))
    assert config_fields == sorted(f"cfg__{item['name']}" for item in _schema(runner))
    html = response.content.decode()
    assert 'name="cfg__greeting"' in html
    assert 'type="password"' in html
    assert 'name="cfg__api_key"' in html
    assert 'type="checkbox" name="cfg__stream"' in html
    assert '<option value="careful">Careful</option>' in html


def test_without_a_runner_the_form_has_no_config_fields(admin_client, runner):
    form = admin_client.get(ADD_URL).context["adminform"].form

    assert not [name for name in form.fields if name.startswith("cfg__")]
    assert runner.runner_id in dict(form.fields["runner_id"].choices)


def test_a_valid_form_creates_the_binding_with_its_secret_encrypted(admin_client, workspace, runner):
    response = admin_client.post(ADD_URL, form_data(workspace, runner))

    assert response.status_code == 302, _errors(response)
    binding = AgentBinding.objects.get(binding_id="from-admin")
    assert binding.source == AgentBinding.Source.ADMIN
    assert binding_runner_config_plain(binding) == {
        "greeting": "hello",
        "max_rounds": 5,
        "api_key": "sk-admin",
        "stream": False,
        "mode": "fast",
        "prompt": [{"role": "system", "content": "be brief"}],
    }


def test_a_missing_required_config_item_is_refused_on_its_field(admin_client, workspace, runner):
    response = admin_client.post(ADD_URL, form_data(workspace, runner, cfg__greeting=""))

    assert response.status_code == 200
    assert "cfg__greeting" in _errors(response)
    assert not AgentBinding.objects.exists()


def test_a_schema_error_is_shown_on_the_offending_field(admin_client, workspace, runner):
    response = admin_client.post(ADD_URL, form_data(workspace, runner, cfg__prompt='[{"role": "system"}]'))

    errors = _errors(response)
    assert "list of {role, content} messages" in errors["cfg__prompt"][0]
    assert not AgentBinding.objects.exists()


def test_scope_errors_are_shown_on_the_scope_fields(admin_client, workspace, runner):
    response = admin_client.post(ADD_URL, form_data(workspace, runner, scope_type="bot", scope_id="ghost"))

    assert "scope_id" in _errors(response)


def test_the_change_form_shows_secrets_masked_and_the_mask_keeps_them(admin_client, workspace, runner):
    binding = binding_create(
        workspace=workspace,
        spec=BindingIn(
            binding_id="b1",
            event_types=["*"],
            runner_id=runner.runner_id,
            runner_config={"greeting": "hi", "api_key": "sk-stored"},
        ),
    )
    url = f"/admin/bindings/agentbinding/{binding.pk}/change/"

    page = admin_client.get(url)
    response = admin_client.post(
        url, form_data(workspace, runner, binding_id="b1", cfg__api_key=SECRET_MASK, cfg__greeting="changed")
    )

    assert "sk-stored" not in page.content.decode()
    assert page.context["adminform"].form.initial["cfg__api_key"] == SECRET_MASK
    assert response.status_code == 302, _errors(response)
    assert binding_runner_config_plain(AgentBinding.objects.get(pk=binding.pk))["api_key"] == "sk-stored"
    assert binding_runner_config_plain(AgentBinding.objects.get(pk=binding.pk))["greeting"] == "changed"


def test_a_superuser_may_create_a_global_binding(admin_client, runner):
    data = {**form_data(WorkspaceFactory.create(), runner, scope_type="global"), "workspace": ""}

    response = admin_client.post(ADD_URL, data)

    assert response.status_code == 302, _errors(response)
    binding = AgentBinding.objects.get()
    assert binding.workspace is None
    assert binding.scope_type == "global"


def test_staff_see_only_bindings_and_bots_of_their_workspaces(runner):
    mine, theirs = WorkspaceFactory.create(), WorkspaceFactory.create()
    staff = UserFactory.create(username="staff", is_staff=True)
    from django.contrib.auth.models import Permission

    staff.user_permissions.set(Permission.objects.filter(content_type__app_label="bindings"))
    workspace_member_add(workspace=mine, user=staff)
    AgentBindingFactory.create(workspace=mine, binding_id="mine-binding")
    AgentBindingFactory.create(workspace=theirs, binding_id="their-binding")
    BotFactory.create(workspace=mine, bot_id="mine-bot")
    BotFactory.create(workspace=theirs, bot_id="their-bot")
    client = Client()
    client.force_login(staff)

    bindings_page = client.get("/admin/bindings/agentbinding/").content.decode()
    bots_page = client.get("/admin/bindings/bot/").content.decode()

    assert "mine-binding" in bindings_page
    assert "their-binding" not in bindings_page
    assert "mine-bot" in bots_page
    assert "their-bot" not in bots_page


def test_bot_credentials_are_masked_in_admin_and_kept_by_the_mask(admin_client, workspace):
    # A platform without credential fields (the API's) keeps the JSON object; the fields are tested in
    # tests/bindings/test_forms_bot_credentials.py.
    bot = BotFactory.create(workspace=workspace, bot_id="tg", platform="api", credentials={"token": "tg-secret"})
    url = f"/admin/bindings/bot/{bot.pk}/change/"

    page = admin_client.get(url)
    response = admin_client.post(
        url,
        {
            "workspace": str(workspace.pk),
            "bot_id": "tg",
            "name": "TG",
            "platform": "api",
            "enabled": "on",
            "credentials_input": json.dumps({"token": SECRET_MASK, "signing": "new"}),
            "_save": "Save",
        },
    )

    assert "tg-secret" not in page.content.decode()
    assert response.status_code == 302, _errors(response)
    assert Bot.objects.get(pk=bot.pk).credentials == {"token": "tg-secret", "signing": "new"}


def _schema(runner):
    return runner.config_schema


def _errors(response) -> dict:
    context = response.context
    if context is None or "adminform" not in context:
        return {}
    return dict(context["adminform"].form.errors)


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"cfg__prompt": '[{"role": "system", "content": "nul \\u0000"}]'}, "cfg__prompt"),
        ({"resource_policy__other": '{"legacy": "m\\u0000"}'}, "resource_policy__other"),
    ],
)
def test_text_the_database_cannot_store_is_refused_on_its_field(admin_client, workspace, runner, overrides, field):
    response = admin_client.post(ADD_URL, form_data(workspace, runner, **overrides))

    assert response.status_code == 200
    assert _errors(response)[field] == ["Must not contain NUL characters or unpaired surrogates."]
    assert not AgentBinding.objects.exists()


def test_bot_credentials_the_database_cannot_store_are_refused(admin_client, workspace):
    response = admin_client.post(
        "/admin/bindings/bot/add/",
        {
            "workspace": str(workspace.pk),
            "bot_id": "tg",
            "name": "TG",
            "platform": "api",
            "enabled": "on",
            "credentials_input": '{"token": "\\ud800"}',
            "_save": "Save",
        },
    )

    assert response.status_code == 200
    assert _errors(response)["credentials_input"] == ["Must not contain NUL characters or unpaired surrogates."]
    assert not Bot.objects.exists()


def test_the_trigger_filter_is_edited_with_controls_and_checked_like_the_api(admin_client, workspace, runner):
    refused = admin_client.post(
        ADD_URL, form_data(workspace, runner, trigger_policy__group_patterns="(help", trigger_policy__chat_types=[])
    )
    response = admin_client.post(
        ADD_URL,
        form_data(
            workspace,
            runner,
            trigger_policy__group_prefixes="ai\n/bot",
            trigger_policy__access_mode="allow",
            trigger_policy__access_group_chat_ids="g-1",
        ),
    )

    errors = _errors(refused)
    assert "not a valid regular expression" in str(errors["trigger_policy__group_patterns"])
    assert "trigger_policy__chat_types" in errors
    assert response.status_code == 302, _errors(response)
    policy = AgentBinding.objects.get(binding_id="from-admin").trigger_policy
    assert (policy["group_prefixes"], policy["access_mode"], policy["access_group_chat_ids"]) == (
        ["ai", "/bot"],
        "allow",
        ["g-1"],
    )
    assert policy["chat_types"] == ["private", "group"]


def test_the_history_grant_and_the_non_text_choice_are_set_in_the_admin(admin_client, workspace, runner):
    response = admin_client.post(
        ADD_URL,
        form_data(
            workspace,
            runner,
            resource_policy__history_conversations="support-42\nsupport-43\n",
            resource_policy__history_same_actor="on",
            delivery_policy__non_text_input="refuse",
        ),
    )

    assert response.status_code == 302, _errors(response)
    binding = AgentBinding.objects.get(binding_id="from-admin")
    assert binding.resource_policy["history_conversations"] == ["support-42", "support-43"]
    assert binding.resource_policy["history_same_actor"] is True
    assert binding.delivery_policy["non_text_input"] == "refuse"
    form = admin_client.get(f"/admin/bindings/agentbinding/{binding.pk}/change/").context["adminform"].form
    assert form.initial["delivery_policy__non_text_input"] == "refuse"
    assert form.initial["resource_policy__history_conversations"] == ["support-42", "support-43"]
