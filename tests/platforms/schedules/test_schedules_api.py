"""REST CRUD of schedules: each one owns the beat rows that fire it, bad cron expressions and time zones
answer 400 naming the field, and a workspace sees and targets only its own bots and bindings."""

from __future__ import annotations

from zoneinfo import ZoneInfo

import pytest
from django_celery_beat.models import CrontabSchedule, PeriodicTask

from platforms.schedules.models import Schedule
from tests.factories import AgentBindingFactory, BotFactory, WorkspaceFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def bot(workspace):
    return BotFactory.create(workspace=workspace, bot_id="news-bot")


def create(client, **fields):
    body = {"name": "Morning news", "cron": "0 9 * * mon-fri", "bot_id": "news-bot", "input_text": "news please"}
    return client.post("/api/v1/schedules", {**body, **fields}, format="json")


def beat_task(schedule_id: str) -> PeriodicTask:
    return PeriodicTask.objects.select_related("crontab").get(langbot_schedule__schedule_id=schedule_id)


def errors_of(response) -> dict[str, str]:
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "invalid_argument", error
    return error["details"]["fields"]


def test_create_a_schedule_and_beat_gets_a_cron_entry_in_its_time_zone(api_client, bot):
    response = create(api_client, timezone="Europe/Berlin")

    assert response.status_code == 201, response.content
    body = response.json()
    assert body["schedule_id"] == "morning-news"
    assert (body["cron"], body["timezone"], body["enabled"]) == ("0 9 * * mon-fri", "Europe/Berlin", True)
    assert (body["bot_id"], body["binding_id"], body["event_type"]) == ("news-bot", None, "message.received")
    assert (body["chat_id"], body["conversation_id"]) == (None, "schedule:morning-news")
    assert body["last_fired_at"] is None
    task = beat_task("morning-news")
    assert task.task == "platforms.schedules.tasks.schedule_fire"
    assert task.enabled
    crontab = task.crontab
    assert (crontab.minute, crontab.hour, crontab.day_of_month, crontab.month_of_year, crontab.day_of_week) == (
        "0", "9", "*", "*", "mon-fri",
    )  # fmt: skip
    assert crontab.timezone == ZoneInfo("Europe/Berlin")


def test_list_and_get_show_the_workspaces_schedules(api_client, bot):
    create(api_client, schedule_id="a")
    create(api_client, schedule_id="b", cron="*/5 * * * *")

    listed = api_client.get("/api/v1/schedules").json()["items"]
    one = api_client.get("/api/v1/schedules/b")

    assert [s["schedule_id"] for s in listed] == ["a", "b"]
    assert one.status_code == 200
    assert one.json()["cron"] == "*/5 * * * *"


def test_patch_changes_the_cron_and_beat_follows(api_client, bot):
    create(api_client, schedule_id="digest")

    response = api_client.patch(
        "/api/v1/schedules/digest", {"cron": "30 18 * * *", "timezone": "Asia/Tokyo"}, format="json"
    )

    assert response.status_code == 200, response.content
    assert (response.json()["cron"], response.json()["input_text"]) == ("30 18 * * *", "news please")
    crontab = beat_task("digest").crontab
    assert (crontab.minute, crontab.hour, crontab.timezone) == ("30", "18", ZoneInfo("Asia/Tokyo"))
    assert CrontabSchedule.objects.count() == 1


def test_disabling_a_schedule_disables_its_beat_entry(api_client, bot):
    create(api_client, schedule_id="digest")

    response = api_client.patch("/api/v1/schedules/digest", {"enabled": False}, format="json")

    assert response.json()["enabled"] is False
    assert PeriodicTask.objects.get(name__startswith="schedule:").enabled is False


def test_delete_removes_the_schedule_and_its_beat_rows(api_client, bot):
    create(api_client, schedule_id="digest")

    response = api_client.delete("/api/v1/schedules/digest")

    assert response.status_code == 204
    assert api_client.get("/api/v1/schedules/digest").status_code == 404
    assert not PeriodicTask.objects.filter(name__startswith="schedule:").exists()
    assert not CrontabSchedule.objects.exists()


@pytest.mark.parametrize(
    ("cron", "hint"),
    [
        ("61 * * * *", "minute"),
        ("0 25 * * *", "hour"),
        ("0 9 * * funday", "day-of-week"),
        ("0 9 * *", "5 fields"),
        ("every morning", "5 fields"),
    ],
)
def test_an_invalid_cron_expression_answers_400_naming_cron(api_client, bot, cron, hint):
    fields = errors_of(create(api_client, cron=cron))

    assert list(fields) == ["cron"]
    assert hint in fields["cron"]
    assert not Schedule.objects.exists()
    assert not PeriodicTask.objects.filter(name__startswith="schedule:").exists()


def test_an_unknown_time_zone_answers_400_naming_timezone(api_client, bot):
    assert list(errors_of(create(api_client, timezone="Mars/Olympus"))) == ["timezone"]


def test_patch_with_a_bad_cron_keeps_the_schedule_as_it_was(api_client, bot):
    create(api_client, schedule_id="digest")

    fields = errors_of(api_client.patch("/api/v1/schedules/digest", {"cron": "* * * * * *"}, format="json"))

    assert list(fields) == ["cron"]
    assert Schedule.objects.get(schedule_id="digest").cron == "0 9 * * mon-fri"


def test_a_schedule_needs_a_bot_or_a_binding_and_message_text(api_client, bot):
    assert list(errors_of(create(api_client, bot_id=None))) == ["bot_id"]
    assert list(errors_of(create(api_client, input_text=" "))) == ["input_text"]


def test_a_taken_schedule_id_answers_400(api_client, bot):
    create(api_client, schedule_id="digest")

    assert list(errors_of(create(api_client, schedule_id="digest"))) == ["schedule_id"]


def test_the_id_of_a_schedule_cannot_change(api_client, bot):
    create(api_client, schedule_id="digest")

    assert list(errors_of(api_client.patch("/api/v1/schedules/digest", {"schedule_id": "x"}, format="json"))) == [
        "schedule_id"
    ]


def test_a_bot_scoped_binding_of_another_bot_is_refused(api_client, workspace, bot):
    AgentBindingFactory.create(workspace=workspace, binding_id="other", scope_type="bot", scope_id="other-bot")

    fields = errors_of(create(api_client, binding_id="other"))

    assert "other-bot" in fields["binding_id"]


def test_another_workspaces_schedule_answers_404(api_client, api_client_for, bot):
    theirs = api_client_for(WorkspaceFactory.create())
    create(api_client, schedule_id="ours")

    assert theirs.get("/api/v1/schedules/ours").status_code == 404
    assert theirs.patch("/api/v1/schedules/ours", {"name": "x"}, format="json").status_code == 404
    assert theirs.delete("/api/v1/schedules/ours").status_code == 404
    assert theirs.get("/api/v1/schedules").json() == {"items": []}
    assert Schedule.objects.filter(schedule_id="ours").exists()


def test_another_workspaces_bot_or_binding_is_refused_as_unknown(api_client, bot):
    other = WorkspaceFactory.create()
    BotFactory.create(workspace=other, bot_id="their-bot")
    AgentBindingFactory.create(workspace=other, binding_id="their-binding")

    bot_fields = errors_of(create(api_client, bot_id="their-bot"))
    binding_fields = errors_of(create(api_client, bot_id=None, binding_id="their-binding"))
    unknown_fields = errors_of(create(api_client, bot_id="no-such-bot"))

    # Word for word what a bot that exists nowhere gets: nothing tells the other workspace's apart.
    assert bot_fields == {"bot_id": "No bot 'their-bot' in this workspace."}
    assert unknown_fields == {"bot_id": "No bot 'no-such-bot' in this workspace."}
    assert binding_fields == {"binding_id": "No binding 'their-binding' in this workspace."}
    assert not Schedule.objects.exists()


def test_a_global_binding_may_be_the_target(api_client, workspace):
    AgentBindingFactory.create(workspace=None, binding_id="everyone", scope_type="global", scope_id="")

    response = create(api_client, bot_id=None, binding_id="everyone")

    assert response.status_code == 201, response.content
    assert response.json()["binding_id"] == "everyone"


def test_unknown_fields_and_wrong_types_answer_400(api_client, bot):
    assert list(errors_of(create(api_client, every="minute"))) == ["every"]
    assert list(errors_of(create(api_client, enabled="yes"))) == ["enabled"]
