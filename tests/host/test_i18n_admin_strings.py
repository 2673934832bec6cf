"""The admin's own Python-side words in Chinese: app names, action descriptions and their messages, column
titles, fieldset titles, form labels and help, choice labels — for a browser that asks for Chinese, while the
English pages keep their words."""

from __future__ import annotations

import pytest
from django.test import Client

from bindings.models import ApiKey
from bindings.services import api_key_create
from resources.models import MCPServer
from tests.factories import UserFactory, WorkspaceFactory

pytestmark = pytest.mark.django_db

ZH = {"Accept-Language": "zh-CN,zh;q=0.9"}


@pytest.fixture
def staff() -> Client:
    client = Client()
    client.force_login(UserFactory.create(username="root", is_staff=True, is_superuser=True))
    return client


def test_the_admin_index_names_its_groups_in_chinese(staff: Client):
    english = staff.get("/admin/").content.decode()
    chinese = staff.get("/admin/", headers=ZH).content.decode()

    assert "Models &amp; tools" in english
    assert "Runners &amp; bindings" in english
    for name in ("模型与工具", "知识库", "运行器与绑定", "机器人与平台", "自动化", "活动", "访问权限"):
        assert name in chinese, name
    assert "Runners &amp; bindings" not in chinese


def test_a_changelist_shows_its_actions_and_columns_in_chinese(staff: Client):
    MCPServer.objects.create(workspace=WorkspaceFactory.create(), server_id="files", name="Files")

    page = staff.get("/admin/resources/mcpserver/", headers=ZH).content.decode()

    assert "刷新工具（立即连接并列出工具）" in page  # the action
    assert "最近错误" in page  # a column
    assert "尚未连接" in page  # the status choice's label


def test_the_binding_form_speaks_chinese(staff: Client):
    page = staff.get("/admin/bindings/agentbinding/add/", headers=ZH).content.decode()

    for words in ("触发", "上下文与状态", "投递与并发", "允许的模型", "留空则根据名称生成。", "群聊：被呼叫时回答"):
        assert words in page, words
    assert "Delivery &amp; concurrency" not in page


def test_an_action_answers_in_chinese(staff: Client):
    workspace = WorkspaceFactory.create()
    key, _plaintext = api_key_create(workspace=workspace, name="ci")

    answer = staff.post(
        "/admin/bindings/apikey/",
        {"action": "revoke", "_selected_action": [key.pk]},
        follow=True,
        headers=ZH,
    ).content.decode()

    assert "已吊销 1 个密钥。" in answer
    assert ApiKey.objects.get(pk=key.pk).revoked_at is not None


def test_model_names_and_field_labels_from_their_models_in_chinese(staff: Client):
    """A model's verbose name and a field's label come from the model (no label of the admin's own), from two
    apps: the schedule's add form and a development token's add form."""
    schedule_en = staff.get("/admin/schedules/schedule/add/").content.decode()
    schedule_zh = staff.get("/admin/schedules/schedule/add/", headers=ZH).content.decode()
    token_zh = staff.get("/admin/runtimes/developmenttoken/add/", headers=ZH).content.decode()

    assert "Cron:" in schedule_en
    assert "Timezone:" in schedule_en
    assert "Cron 表达式" in schedule_zh  # the field label
    assert "时区" in schedule_zh
    assert "增加 定时任务" in schedule_zh  # the model name in the page title
    assert "Timezone:" not in schedule_zh
    assert "增加 开发令牌" in token_zh
    assert "过期时间" in token_zh
