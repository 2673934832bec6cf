"""Runner manifests' labels (`zh_Hans` beside `en_US`) in the language the admin is shown in: the runner list
and page, the binding form's runner choice and the runner config form built from the manifest's schema, both
for a browser that asks for Chinese and after the language switch; English (or the only label given) otherwise."""

from __future__ import annotations

import pytest
from django.test import Client

from bindings.models import RunnerDescriptor
from tests.factories import RunnerDescriptorFactory, UserFactory

pytestmark = pytest.mark.django_db

RUNNER_ID = "plugin:tester/qa/default"
SCHEMA = [
    {
        "name": "behaviour", "type": "select", "required": False, "default": "ok",
        "label": {"en_US": "Behaviour", "zh_Hans": "行为"},
        "description": {"en_US": "What the runner does.", "zh_Hans": "运行器的行为。"},
        "options": [
            {"name": "ok", "label": {"en_US": "Reply at once", "zh_Hans": "立即回复"}},
            {"name": "slow", "label": {"en_US": "Reply slowly"}},
        ],
    },
    {"name": "sleep_seconds", "type": "float", "label": {"en_US": "Sleep"}, "default": 5},
]  # fmt: skip


@pytest.fixture
def admin_client() -> Client:
    RunnerDescriptorFactory.create(
        runner_id=RUNNER_ID,
        label={"en_US": "QA Runner", "zh_Hans": "QA 测试运行器"},
        description={"en_US": "Replies on demand.", "zh_Hans": "按需回复。"},
        config_schema=SCHEMA,
    )
    client = Client()
    client.force_login(UserFactory.create(username="root", is_staff=True, is_superuser=True))
    return client


def _binding_form(client: Client, accept_language: str | None = None) -> str:
    headers = {"Accept-Language": accept_language} if accept_language else {}
    return client.get("/admin/bindings/agentbinding/add/", {"runner_id": RUNNER_ID}, headers=headers).content.decode()


def test_the_binding_forms_runner_and_config_labels_in_chinese_for_a_chinese_browser(admin_client):
    page = _binding_form(admin_client, "zh-CN,zh;q=0.9")

    assert f"QA 测试运行器 — {RUNNER_ID}" in page  # the runner select
    assert ">行为:</label>" in page or ">行为：</label>" in page  # the config item's label
    assert "运行器的行为。" in page  # its help text
    assert ">立即回复</option>" in page
    assert ">Reply slowly</option>" in page  # no Chinese label: the English one
    assert ">Sleep:</label>" in page or ">Sleep：</label>" in page
    assert "QA Runner —" not in page
    assert ">Behaviour" not in page


def test_the_binding_form_in_english_by_default(admin_client):
    page = _binding_form(admin_client)

    assert f"QA Runner — {RUNNER_ID}" in page
    assert ">Reply at once</option>" in page
    assert "What the runner does." in page
    assert "行为" not in page
    assert "立即回复" not in page


def test_the_switch_turns_the_runner_list_and_form_to_chinese(admin_client):
    answer = admin_client.post("/i18n/setlang/", {"language": "zh-hans", "next": "/admin/"})
    assert answer.status_code == 302

    runners = admin_client.get("/admin/bindings/runnerdescriptor/", HTTP_ACCEPT_LANGUAGE="en").content.decode()
    runner = RunnerDescriptor.objects.get(runner_id=RUNNER_ID)
    detail = admin_client.get(f"/admin/bindings/runnerdescriptor/{runner.pk}/change/").content.decode()
    page = _binding_form(admin_client, "en")

    assert '<td class="field-label_display">QA 测试运行器</td>' in runners
    assert "QA 测试运行器" in detail
    assert "按需回复。" in detail
    assert "<td>行为</td>" in detail
    assert f"QA 测试运行器 — {RUNNER_ID}" in page
    assert ">立即回复</option>" in page
