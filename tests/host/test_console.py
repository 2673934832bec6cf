"""The admin as an operator's console (issue 31): the home page's figures against known runs, the menu in
groups by setup order, Celery beat's own models gone from the admin, a staff member seeing only their
workspaces' figures, the workspace picked for whoever has one, help texts shown as written, and names
spelled right."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.contrib import admin
from django.contrib.auth.models import Permission
from django.test import Client
from django.utils import timezone

from bindings.models import Bot, WorkspaceMembership
from langbot_host.admin_site.dashboard import ModelFigures, dashboard_for, percentile
from langbot_host.admin_site.navigation import GROUPS
from platforms.connectors import connection_status_set
from runners.models import Run
from tests.factories import BotFactory, UserFactory, WorkspaceFactory
from tests.streaming.conftest import make_run
from transcripts.models import TranscriptItem

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 3, 2, 12, 30, tzinfo=UTC)


def usage(model: str, prompt: int, completion: int, cost: str | None = None) -> dict[str, object]:
    tally: dict[str, object] = {"prompt_tokens": prompt, "completion_tokens": completion, "calls": 1}
    if cost is not None:
        tally["cost"] = cost
    return {"host": {"models": {model: tally}}}


def run_at(workspace, status: str, *, created: datetime, seconds: float | None = None, binding_key: str = "", **fields):
    run = make_run(workspace, status=status, conversation_id=f"c-{created:%H%M%S}-{status}")
    update: dict[str, object] = {"created_at": created, **fields}
    if binding_key:
        update["binding_key"] = binding_key
    if seconds is not None:
        update["started_at"] = created
        update["finished_at"] = created + timedelta(seconds=seconds)
    Run.objects.filter(pk=run.pk).update(**update)
    return run


def message_at(workspace, conversation_id: str, role: str, created: datetime) -> None:
    item = TranscriptItem.objects.create(workspace=workspace, conversation_id=conversation_id, role=role, content="x")
    TranscriptItem.objects.filter(pk=item.pk).update(created_at=created)


@pytest.fixture
def acme():
    workspace = WorkspaceFactory.create(slug="acme")
    hour = NOW.replace(minute=0)
    run_at(
        workspace,
        Run.Status.COMPLETED,
        created=hour + timedelta(minutes=1),
        seconds=1,
        usage=usage("gpt-4o", 100, 20, "0.5"),
    )
    run_at(
        workspace,
        Run.Status.COMPLETED,
        created=hour + timedelta(minutes=2),
        seconds=2,
        usage=usage("gpt-4o", 50, 10, "0.25"),
    )
    run_at(workspace, Run.Status.COMPLETED, created=hour - timedelta(hours=2), seconds=3, usage=usage("mini", 7, 3))
    run_at(workspace, Run.Status.FAILED, created=hour - timedelta(hours=2), seconds=10, binding_key="flaky")
    run_at(workspace, Run.Status.TIMEOUT, created=hour - timedelta(hours=3), seconds=300, binding_key="flaky")
    run_at(workspace, Run.Status.CANCELLED, created=hour - timedelta(hours=3), seconds=50)
    run_at(workspace, Run.Status.QUEUED, created=hour + timedelta(minutes=5))
    run_at(workspace, Run.Status.QUEUED, created=hour + timedelta(minutes=9))
    # Two days ago: outside the last 24 hours.
    run_at(
        workspace,
        Run.Status.FAILED,
        created=hour - timedelta(days=2),
        seconds=1,
        binding_key="old",
        usage=usage("old-model", 1000, 1000),
    )
    message_at(workspace, "c-1", TranscriptItem.Role.USER, hour + timedelta(minutes=1))
    message_at(workspace, "c-1", TranscriptItem.Role.ASSISTANT, hour + timedelta(minutes=2))
    message_at(workspace, "c-1", TranscriptItem.Role.TOOL, hour + timedelta(minutes=2))  # not a message
    message_at(workspace, "c-2", TranscriptItem.Role.USER, hour - timedelta(hours=2))
    message_at(workspace, "c-3", TranscriptItem.Role.USER, hour - timedelta(days=2))  # outside
    return workspace


def test_the_dashboard_adds_up_known_runs(acme):
    superuser = UserFactory.create(is_staff=True, is_superuser=True)

    board = dashboard_for(user=superuser, now=NOW)

    assert board.workspaces is None  # a superuser sees the whole host
    assert (board.since, board.until) == (datetime(2026, 3, 1, 13, tzinfo=UTC), datetime(2026, 3, 2, 13, tzinfo=UTC))
    per_hour = {row.hour.hour: (row.runs, row.messages) for row in board.per_hour if row.runs or row.messages}
    assert per_hour == {9: (2, 0), 10: (2, 1), 12: (4, 2)}
    assert len(board.per_hour) == 24
    assert (board.runs, board.messages) == (8, 3)
    # Cancelled runs are neither a success nor a failure: 3 completed of 5 that ended.
    assert (board.completed, board.ended, board.success_rate) == (3, 5, 0.6)
    assert (board.p50_seconds, board.p95_seconds) == (3.0, 300.0)
    assert board.models == [ModelFigures("gpt-4o", 2, 150, 30, "0.75"), ModelFigures("mini", 1, 7, 3, "0")]
    assert board.active_conversations == 2
    assert [(row.binding_key, row.failed, row.runs) for row in board.failing_bindings] == [("flaky", 2, 2)]
    assert board.queued == 2
    assert board.oldest_queued_at == NOW.replace(minute=5)


def test_percentile_is_the_nearest_rank():
    assert percentile([], 0.5) is None
    assert percentile([4.0], 0.95) == 4.0
    assert percentile([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0], 0.5) == 5.0
    assert percentile([float(n) for n in range(1, 101)], 0.95) == 95.0


def test_a_member_sees_only_their_workspaces_figures(acme, client: Client):
    theirs = WorkspaceFactory.create(slug="theirs")
    for minute in range(3):
        run_at(
            theirs,
            Run.Status.FAILED,
            created=timezone.now() - timedelta(minutes=minute),
            seconds=1,
            binding_key="their-secret-binding",
        )
    BotFactory.create(workspace=theirs, bot_id="their-secret-bot")
    mine = WorkspaceFactory.create(slug="mine")
    run_at(mine, Run.Status.COMPLETED, created=timezone.now(), seconds=2)
    BotFactory.create(workspace=mine, bot_id="my-bot")
    staff = UserFactory.create(is_staff=True)
    WorkspaceMembership.objects.create(workspace=mine, user=staff, role="owner")
    client.force_login(staff)

    response = client.get("/admin/")

    board = response.context["dashboard"]
    assert board.workspaces == ["mine"]
    assert (board.runs, board.completed, board.ended, board.failing_bindings) == (1, 1, 1, [])
    assert [bot.label for bot in board.bots] == ["mine/my-bot"]
    page = response.content.decode()
    assert "my-bot" in page
    assert "their-secret" not in page


def test_the_home_page_shows_the_figures_and_the_chart_library_from_static(acme, client: Client):
    BotFactory.create(workspace=acme, bot_id="tg", platform=Bot.Platform.TELEGRAM)
    discord = BotFactory.create(workspace=acme, bot_id="dc", platform=Bot.Platform.DISCORD)
    BotFactory.create(workspace=acme, bot_id="off", enabled=False)
    connection_status_set(bot_pk=discord.pk, state="connected")
    client.force_login(UserFactory.create(is_staff=True, is_superuser=True))

    page = client.get("/admin/").content.decode()

    assert "/static/console/chart.umd.min.js" in page
    assert "https://" not in page.split("<body")[0]  # nothing from a CDN in the head
    assert 'id="console-per-hour-data"' in page
    states = {bot.label: bot.state for bot in client.get("/admin/").context["dashboard"].bots}
    assert states == {"acme/tg": "webhook", "acme/dc": "connected", "acme/off": "disabled"}


def test_the_menu_is_grouped_in_setup_order(client: Client):
    client.force_login(UserFactory.create(is_staff=True, is_superuser=True))

    app_list = client.get("/admin/").context["app_list"]

    assert [str(group["name"]) for group in app_list] == [
        "Models & tools", "Knowledge", "Runners & bindings", "Bots & platforms", "Automation", "Activity", "Access",
    ]  # fmt: skip
    names = {str(group["name"]): [str(model["name"]) for model in group["models"]] for group in app_list}
    assert names["Models & tools"] == ["Model providers", "Models", "MCP servers"]
    assert names["Automation"] == ["Webhook endpoints", "Webhook deliveries", "Schedules", "Alert thresholds"]
    assert names["Activity"][0] == "Alerts"
    at = names["Activity"].index("Transcript items")
    assert names["Activity"][at : at + 3] == ["Transcript items", "Runs", "Events"]
    assert names["Activity"][names["Activity"].index("Daily spend") + 1] == "Model usage"
    assert names["Access"][0] == "Workspaces"
    # An app's own page still lists that app's models.
    assert client.get("/admin/resources/").status_code == 200


def test_every_registered_admin_has_a_place_in_the_menu():
    placed = {label for group in GROUPS for label in group.models}
    registered = {model._meta.label for model in admin.site._registry}

    assert sorted(registered - placed) == []


def test_celery_beats_own_models_are_not_in_the_admin(client: Client):
    client.force_login(UserFactory.create(is_staff=True, is_superuser=True))

    assert not [m for m in admin.site._registry if m._meta.app_label == "django_celery_beat"]
    page = client.get("/admin/").content.decode()
    for name in ("Crontabs", "Intervals", "Solar events", "Clocked", "Periodic tasks"):
        assert name not in page
    assert client.get("/admin/django_celery_beat/periodictask/").status_code == 404


def test_names_are_spelled_right(client: Client):
    client.force_login(UserFactory.create(is_staff=True, is_superuser=True))

    page = client.get("/admin/").content.decode()

    for right in ("MCP servers", "Webhook deliveries", "Platform deliveries"):
        assert right in page
    for wrong in ("Mcp servers", "deliverys"):
        assert wrong not in page


def test_an_add_form_picks_the_workspace_of_someone_who_has_one(client: Client):
    WorkspaceFactory.create(slug="other")
    only = WorkspaceFactory.create(slug="only")
    staff = UserFactory.create(is_staff=True)
    staff.user_permissions.add(*Permission.objects.filter(codename__in=["add_modelprovider", "view_modelprovider"]))
    WorkspaceMembership.objects.create(workspace=only, user=staff, role="owner")
    client.force_login(staff)

    form = client.get("/admin/resources/modelprovider/add/").context["adminform"].form

    assert form["workspace"].value() == only.pk


def test_an_add_form_leaves_the_workspace_to_pick_among_several(client: Client):
    WorkspaceFactory.create(slug="one")
    WorkspaceFactory.create(slug="two")
    client.force_login(UserFactory.create(is_staff=True, is_superuser=True))

    form = client.get("/admin/resources/modelprovider/add/").context["adminform"].form

    assert form["workspace"].value() is None


def test_help_texts_show_as_written(client: Client):
    client.force_login(UserFactory.create(is_staff=True, is_superuser=True))

    page = client.get("/admin/schedules/schedule/add/").content.decode()

    assert "<code>bot:&lt;bot_id&gt;:&lt;chat_id&gt;</code>" in page
    assert "<code>0 9 * * mon-fri</code>" in page
    assert "`" not in page.split('id="content-main"')[1].split("<script")[0]
