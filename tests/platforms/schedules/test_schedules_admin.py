"""Admin of schedules: saving and deleting there keeps beat's rows in step, a bad cron is shown on its
field, and staff see and pick only their workspaces' schedules, bots and bindings."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django_celery_beat.models import PeriodicTask

from bindings.services import workspace_member_add
from platforms.schedules.models import Schedule
from platforms.schedules.services import schedule_create
from platforms.schedules.specs import ScheduleIn
from tests.factories import BotFactory, UserFactory, WorkspaceFactory

pytestmark = pytest.mark.django_db

URL = "/admin/schedules/schedule/"


@pytest.fixture
def staff(workspace) -> Client:
    user = UserFactory.create(username="staff", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(content_type__app_label="schedules"))
    workspace_member_add(workspace=workspace, user=user)
    client = Client()
    client.force_login(user)
    return client


def form(workspace, target_bot, **overrides):
    data = {
        "workspace": str(workspace.pk),
        "schedule_id": "daily",
        "name": "Daily",
        "cron": "0 9 * * *",
        "timezone": "Europe/Paris",
        "enabled": "on",
        "bot": str(target_bot.pk),
        "binding": "",
        "event_type": "message.received",
        "input_text": "good morning",
        "conversation_id": "",
        "_save": "Save",
    }
    data.update(overrides)
    return data


def test_adding_a_schedule_in_the_admin_gives_beat_its_entry(staff, workspace):
    bot = BotFactory.create(workspace=workspace)

    response = staff.post(f"{URL}add/", form(workspace, bot))

    assert response.status_code == 302, response.content.decode()[-2000:]
    crontab = PeriodicTask.objects.get(langbot_schedule__schedule_id="daily").crontab
    assert (crontab.hour, str(crontab.timezone)) == ("9", "Europe/Paris")


def test_a_bad_cron_in_the_admin_is_shown_on_the_field(staff, workspace):
    bot = BotFactory.create(workspace=workspace)

    response = staff.post(f"{URL}add/", form(workspace, bot, cron="0 9 * *"))

    assert response.status_code == 200
    assert "5 fields" in " ".join(response.context["adminform"].form.errors["cron"])
    assert not Schedule.objects.exists()


def test_editing_and_deleting_in_the_admin_keep_beat_in_step(staff, workspace):
    bot = BotFactory.create(workspace=workspace)
    staff.post(f"{URL}add/", form(workspace, bot))
    schedule = Schedule.objects.get(schedule_id="daily")

    staff.post(f"{URL}{schedule.pk}/change/", form(workspace, bot, cron="15 7 * * *", enabled=""))
    task = PeriodicTask.objects.get(pk=schedule.periodic_task_id)
    assert (task.crontab.minute, task.crontab.hour, task.enabled) == ("15", "7", False)

    staff.post(f"{URL}{schedule.pk}/delete/", {"post": "yes"})
    assert not Schedule.objects.exists()
    assert not PeriodicTask.objects.filter(pk=task.pk).exists()


def test_staff_see_only_their_workspaces_schedules_and_bots(staff, workspace):
    mine_bot = BotFactory.create(workspace=workspace, bot_id="mine-bot")
    other = WorkspaceFactory.create()
    their_bot = BotFactory.create(workspace=other, bot_id="their-bot")
    spec = {"cron": "* * * * *", "bot_id": "their-bot", "input_text": "x"}
    theirs = schedule_create(workspace=other, spec=ScheduleIn.model_validate({**spec, "schedule_id": "theirs"}))

    listing = staff.get(URL).content.decode()
    add_page = staff.get(f"{URL}add/").content.decode()
    picked = staff.post(f"{URL}add/", form(workspace, mine_bot, bot=str(their_bot.pk)))

    assert "theirs" not in listing
    assert staff.get(f"{URL}{theirs.pk}/change/").status_code == 302
    assert "mine-bot" in add_page
    assert "their-bot" not in add_page
    assert "bot" in picked.context["adminform"].form.errors
    assert not Schedule.objects.filter(workspace=workspace).exists()
