"""The admin as a newcomer meets it: a runs list that fits a laptop (short ids, status, duration), a
runner's config schema as a table in the admin's language, help texts without Markdown backticks, and an
"Add" for API keys that shows the new key once."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.test import Client

from bindings.models import ApiKey
from bindings.selectors import api_key_by_plaintext
from runners.models import Run
from tests.factories import AgentBindingFactory, RunnerDescriptorFactory, UserFactory, WorkspaceFactory
from tests.streaming.conftest import chat_caller
from webchat.chat import chat_message_submit

pytestmark = pytest.mark.django_db

SCHEMA = [
    {
        "name": "behaviour", "type": "select", "required": False, "default": "ok",
        "label": {"en_US": "Behaviour", "zh_Hans": "行为"},
        "description": {"en_US": "Used without a `qa:<behaviour>` prefix."},
        "options": [{"name": "ok", "label": {"en_US": "ok"}}, {"name": "slow", "label": {"en_US": "slow"}}],
    },
    {"name": "sleep_seconds", "type": "float", "label": {"en_US": "Sleep"}, "default": 5},
]  # fmt: skip


@pytest.fixture
def admin_client() -> Client:
    client = Client()
    client.force_login(UserFactory.create(username="root", is_staff=True, is_superuser=True))
    return client


def test_the_runs_list_shows_short_ids_status_and_duration(admin_client, monkeypatch):
    monkeypatch.setattr("runners.lifecycle.services.run_dispatch", lambda *, run_id: None)
    workspace = WorkspaceFactory.create()
    AgentBindingFactory.create(workspace=workspace, binding_id="main", runner_id="plugin:langbot/qa-runner/default")
    caller = chat_caller(workspace)
    chat_message_submit(caller=caller, conversation_id="c-1", text="hi", attachments=[])
    run = Run.objects.get()
    Run.objects.filter(pk=run.pk).update(
        status="completed", started_at=run.created_at, finished_at=run.created_at + timedelta(seconds=2.5)
    )

    page = admin_client.get("/admin/runners/run/").content.decode()

    run_id = str(run.run_id)
    assert f'title="{run_id}">{run_id[:8]}</code>' in page
    assert ">Completed</span>" in page  # the status's label, in the page's language
    assert "2.5 s" in page
    assert 'title="plugin:langbot/qa-runner/default">qa-runner</span>' in page
    detail = admin_client.get(f"/admin/runners/run/{run.pk}/change/").content.decode()
    assert "2.5 s" in detail


def test_a_runner_page_shows_its_label_and_config_schema_as_a_table(admin_client):
    runner = RunnerDescriptorFactory.create(
        label={"en_US": "QA Runner", "zh_Hans": "QA 测试运行器"},
        description={"en_US": "Replies on demand (see `README.md`)."},
        config_schema=SCHEMA,
    )

    page = admin_client.get(f"/admin/bindings/runnerdescriptor/{runner.pk}/change/").content.decode()

    assert "QA Runner" in page
    assert "zh_Hans" not in page  # not the raw i18n dict
    assert "<code>README.md</code>" in page
    assert '<table class="config-schema">' in page
    assert "<td><code>behaviour</code></td><td>select</td><td>no</td><td>ok</td><td>Behaviour</td>" in page
    assert "Used without a <code>qa:&lt;behaviour&gt;</code> prefix." in page


def test_binding_form_help_texts_show_code_not_backticks(admin_client):
    RunnerDescriptorFactory.create(runner_id="plugin:tester/qa/default", config_schema=SCHEMA)

    page = admin_client.get("/admin/bindings/agentbinding/add/", {"runner_id": "plugin:tester/qa/default"})

    html = page.content.decode()
    assert "Used without a <code>qa:&lt;behaviour&gt;</code> prefix." in html
    assert "`" not in html.split('id="content-main"')[1].split("<script")[0]


def test_adding_an_api_key_shows_it_once_and_it_works(admin_client):
    workspace = WorkspaceFactory.create()

    answer = admin_client.post(
        "/admin/bindings/apikey/add/", {"workspace": workspace.pk, "name": "ci"}, follow=True
    ).content.decode()

    key = ApiKey.objects.get(workspace=workspace)
    assert key.name == "ci"
    match = re.search(rf"not shown again: (lbk_{key.prefix}_[\w-]+)<", answer)
    assert match is not None
    plaintext = match[1]
    assert api_key_by_plaintext(key=plaintext) == key
    assert plaintext not in admin_client.get(f"/admin/bindings/apikey/{key.pk}/change/").content.decode()


def test_the_events_list_shows_short_ids_with_the_full_ones_in_tooltips(admin_client, monkeypatch):
    monkeypatch.setattr("runners.lifecycle.services.run_dispatch", lambda *, run_id: None)
    workspace = WorkspaceFactory.create()
    AgentBindingFactory.create(workspace=workspace)
    caller = chat_caller(workspace)
    conversation_id = "webui:" + "c" * 32
    submission = chat_message_submit(caller=caller, conversation_id=conversation_id, text="hi", attachments=[])

    page = admin_client.get("/admin/transcripts/eventlog/").content.decode()

    assert f'title="{conversation_id}">{conversation_id[:20]}…</a>' in page
    assert f'title="{submission.event_id}">' in page


def test_runner_labels_follow_the_admins_language(admin_client):
    runner = RunnerDescriptorFactory.create(
        label={"en_US": "QA Runner", "zh_Hans": "QA 测试运行器"}, config_schema=SCHEMA
    )

    # The browser's language (LocaleMiddleware): tests/bindings/test_manifest_labels_i18n.py has the switch.
    page = admin_client.get(
        f"/admin/bindings/runnerdescriptor/{runner.pk}/change/", HTTP_ACCEPT_LANGUAGE="zh-Hans"
    ).content.decode()

    assert "QA 测试运行器" in page
    assert "<td>行为</td>" in page  # the config item's label too
