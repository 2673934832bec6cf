"""What the debug chat page tells a new user before they type: which binding each "Send to" target
reaches (as the resolver would choose it now, read again after an edit) and conversations titled by
their first words."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from bindings.models import AgentBinding, WorkspaceMembership
from tests.factories import AgentBindingFactory, BotFactory, UserFactory, WorkspaceFactory
from webchat.chat import ChatCaller, chat_message_submit

pytestmark = pytest.mark.django_db


@pytest.fixture
def signed_in():
    workspace = WorkspaceFactory.create()
    user = UserFactory.create()
    WorkspaceMembership.objects.create(workspace=workspace, user=user, role=WorkspaceMembership.Role.ADMIN)
    client = Client()
    client.force_login(user)
    return workspace, client


def _config(client: Client) -> dict:
    page = client.get("/chat/")
    assert page.status_code == 200
    marker = '<script id="chat-config" type="application/json">'
    text = page.content.decode()
    return json.loads(text[text.index(marker) + len(marker) : text.index("</script>", text.index(marker))])


def test_each_target_names_the_binding_that_answers_it(signed_in):
    workspace, client = signed_in
    bot = BotFactory.create(workspace=workspace, bot_id="support")
    AgentBindingFactory.create(workspace=workspace, binding_id="general", runner_id="plugin:a/general/default")
    AgentBindingFactory.create(
        workspace=workspace, binding_id="support-agent", runner_id="plugin:a/support/default",
        scope_type=AgentBinding.ScopeType.BOT, scope_id=bot.bot_id,
    )  # fmt: skip

    config = _config(client)

    assert config["default"]["replying"]["binding_id"] == "general"
    [support] = config["bots"]
    assert (support["bot_id"], support["replying"]["binding_id"]) == ("support", "support-agent")


def test_the_default_target_says_so_when_nothing_answers_it(signed_in):
    workspace, client = signed_in
    bot = BotFactory.create(workspace=workspace)
    AgentBindingFactory.create(workspace=workspace, scope_type=AgentBinding.ScopeType.BOT, scope_id=bot.bot_id)

    assert _config(client)["default"] == {"replying": None, "conflict": []}


# Committed writes: on PostgreSQL the resolver's candidates are cached per row version, which a write in
# the same transaction as the first read would not change.
@pytest.mark.django_db(transaction=True)
def test_the_targets_read_again_show_a_runner_changed_since_the_page_loaded(signed_in):
    workspace, client = signed_in
    binding = AgentBindingFactory.create(workspace=workspace, binding_id="main", runner_id="plugin:a/old/default")
    assert _config(client)["default"]["replying"]["runner_id"] == "plugin:a/old/default"

    AgentBinding.objects.filter(pk=binding.pk).update(runner_id="plugin:a/new/default")
    targets = client.get("/chat/targets/").json()

    assert targets["default"]["replying"]["runner_id"] == "plugin:a/new/default"
    assert [b["runner_id"] for b in targets["bindings"]] == ["plugin:a/new/default"]


def test_conversations_are_titled_by_their_first_message(signed_in, monkeypatch):
    monkeypatch.setattr("runners.lifecycle.services.run_dispatch", lambda *, run_id: None)
    workspace, client = signed_in
    AgentBindingFactory.create(workspace=workspace)
    member = WorkspaceMembership.objects.get(workspace=workspace)
    caller = ChatCaller(workspace_id=workspace.pk, principal=f"user:{member.user_id}", display_name="Ada")
    for text in ("Where is my parcel?", "and the invoice"):
        chat_message_submit(caller=caller, conversation_id="webui:c1", text=text, attachments=[])

    [conversation] = _config(client)["conversations"]

    assert (conversation["title"], conversation["preview"]) == ("Where is my parcel?", "and the invoice")
    assert conversation["started_at"]


def test_view_site_lands_on_a_page_linking_chat_admin_and_api_docs(client):
    page = client.get("/")

    assert page.status_code == 200
    html = page.content.decode()
    for href in ('href="/chat/"', 'href="/admin/"', 'href="/api/docs/"'):
        assert href in html
    assert "favicon.svg" in html
    assert client.get("/favicon.ico").status_code == 301


def test_admin_pages_name_the_favicon(signed_in):
    from django.contrib.auth import get_user_model

    staff = get_user_model().objects.create_user("staff-fav", is_staff=True, is_superuser=True)
    client = Client()
    client.force_login(staff)

    assert "favicon.svg" in client.get("/admin/").content.decode()
