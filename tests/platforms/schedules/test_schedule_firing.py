"""Firing schedules: each tick posts one `source: scheduler` event through the gateway, however often beat
sends it. Beat is django-celery-beat's real `DatabaseScheduler` on a controlled clock (time-machine): a
"restart" is a new scheduler reading the database, a crash one that never wrote its state back; its sends
go to a list that the test then runs as a worker would."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django_celery_beat.models import PeriodicTask
from django_celery_beat.schedulers import DatabaseScheduler

from bindings.models import AgentBinding, Bot
from bindings.services import bot_delete
from langbot_host.celery import app as celery_app
from platforms.schedules.models import Schedule
from platforms.schedules.services import schedule_create, schedule_fire
from platforms.schedules.specs import ScheduleIn
from platforms.schedules.tasks import schedule_fire as schedule_fire_task
from runners.models import Run
from tests.factories import AgentBindingFactory, BotFactory
from transcripts.models import EventLog

pytestmark = pytest.mark.django_db

START = datetime(2026, 3, 2, 10, 0, 30, tzinfo=UTC)


def at(hour: int, minute: int, second: int = 0) -> datetime:
    return START.replace(hour=hour, minute=minute, second=second)


@pytest.fixture
def binding(workspace) -> AgentBinding:
    BotFactory.create(workspace=workspace, bot_id="news-bot")
    return AgentBindingFactory.create(workspace=workspace, binding_id="news", event_types=["message.received"])


@pytest.fixture
def clock() -> Iterator[time_machine.Traveller]:
    with time_machine.travel(START, tick=False) as traveller:
        yield traveller


def every_minute(workspace, **fields) -> Schedule:
    spec = {"schedule_id": "minutely", "cron": "* * * * *", "bot_id": "news-bot", "input_text": "tick", **fields}
    return schedule_create(workspace=workspace, spec=ScheduleIn.model_validate(spec))


def scheduler_events(workspace) -> list[EventLog]:
    return list(EventLog.objects.filter(workspace=workspace, source="scheduler").order_by("event_time"))


def test_a_fired_tick_posts_a_scheduler_event_and_a_run_of_the_bots_binding(workspace, binding, clock):
    schedule = every_minute(workspace, conversation_id="ops-room")

    clock.move_to(at(10, 1, 1))
    schedule_fire(schedule_pk=schedule.pk)

    [event] = scheduler_events(workspace)
    assert event.event_id == "schedule:minutely:20260302T1001Z"
    assert (event.event_type, event.source, event.event_time) == ("message.received", "scheduler", at(10, 1))
    assert Bot.objects.get(events=event).bot_id == "news-bot"
    assert (event.conversation_id, event.input["text"]) == ("ops-room", "tick")
    assert event.actor == {"actor_type": "system", "actor_id": "scheduler", "actor_name": "Scheduler", "metadata": {}}
    assert event.subject == {
        "subject_type": "schedule",
        "subject_id": "minutely",
        "data": {"name": "", "cron": "* * * * *", "timezone": "UTC"},
    }
    assert event.data["scheduled_at"] == "2026-03-02T10:01:00+00:00"
    [run] = Run.objects.filter(event=event)
    assert run.binding_key == "news"
    schedule.refresh_from_db()
    assert (schedule.last_fired_at, schedule.last_event_id, schedule.last_error) == (at(10, 1), event.event_id, "")


def test_a_schedule_to_a_bots_chat_joins_that_chats_conversation_and_names_the_chat(workspace, binding, clock):
    # The platform adapters deliver the reply to `data.chat_id`.
    schedule = every_minute(workspace, chat_id="-100123")

    clock.move_to(at(10, 1, 0))
    schedule_fire(schedule_pk=schedule.pk)

    [event] = scheduler_events(workspace)
    assert event.data["chat_id"] == "-100123"
    assert event.conversation_id == "bot:news-bot:-100123"


def test_the_same_tick_fired_twice_posts_one_event_and_one_run(workspace, binding, clock):
    schedule = every_minute(workspace)

    clock.move_to(at(10, 1, 0))
    first = schedule_fire(schedule_pk=schedule.pk)
    clock.move_to(at(10, 1, 40))
    second = schedule_fire(schedule_pk=schedule.pk)

    assert first.event_id == "schedule:minutely:20260302T1001Z"
    assert second.event_id is None
    assert second.tick == first.tick
    assert len(scheduler_events(workspace)) == 1
    assert Run.objects.filter(workspace=workspace).count() == 1


def test_a_tick_whose_claim_was_lost_is_still_posted_once(workspace, binding, clock):
    # Given a tick posted, and then the schedule's record of it gone (restored from a backup, say)
    schedule = every_minute(workspace)
    clock.move_to(at(10, 1, 2))
    schedule_fire(schedule_pk=schedule.pk)
    Schedule.objects.filter(pk=schedule.pk).update(last_fired_at=None)

    # When the same tick is fired again
    schedule_fire(schedule_pk=schedule.pk)

    # Then the gateway knows the tick's event id: still one event, one run
    assert len(scheduler_events(workspace)) == 1
    assert Run.objects.filter(workspace=workspace).count() == 1


def test_a_late_firing_posts_the_latest_tick_once_not_every_missed_one(workspace, binding, clock):
    schedule = every_minute(workspace, cron="*/5 * * * *")

    clock.move_to(at(10, 17, 12))
    schedule_fire(schedule_pk=schedule.pk)
    clock.move_to(at(10, 19, 50))
    schedule_fire(schedule_pk=schedule.pk)

    assert [e.event_time for e in scheduler_events(workspace)] == [at(10, 15)]


def test_the_cron_is_read_in_the_schedules_time_zone(workspace, binding, clock):
    # 09:00 in Tokyo is 00:00 UTC
    schedule = every_minute(workspace, cron="0 9 * * *", timezone="Asia/Tokyo")

    clock.move_to(at(10, 0, 0))
    schedule_fire(schedule_pk=schedule.pk)

    [event] = scheduler_events(workspace)
    assert event.event_time == datetime(2026, 3, 2, 0, 0, tzinfo=UTC)


def test_a_disabled_bot_is_recorded_as_the_last_error_and_the_next_tick_clears_it(workspace, binding, clock):
    schedule = every_minute(workspace)
    Bot.objects.filter(bot_id="news-bot").update(enabled=False)

    clock.move_to(at(10, 1, 0))
    schedule_fire(schedule_pk=schedule.pk)
    schedule.refresh_from_db()
    assert "disabled" in schedule.last_error
    assert schedule.last_error_at == at(10, 1)
    assert scheduler_events(workspace) == []

    Bot.objects.filter(bot_id="news-bot").update(enabled=True)
    clock.move_to(at(10, 2, 0))
    schedule_fire(schedule_pk=schedule.pk)
    schedule.refresh_from_db()
    assert schedule.last_error == ""
    assert len(scheduler_events(workspace)) == 1


def test_a_schedule_of_a_binding_runs_it_whatever_its_event_types(workspace, clock):
    AgentBindingFactory.create(workspace=workspace, binding_id="nightly", event_types=["cron.only"])
    schedule = every_minute(workspace, bot_id=None, binding_id="nightly")

    clock.move_to(at(10, 1, 0))
    schedule_fire(schedule_pk=schedule.pk)

    [event] = scheduler_events(workspace)
    assert [r.binding_key for r in Run.objects.filter(event=event)] == ["nightly"]


def test_a_disabled_schedule_posts_nothing_when_a_stale_beat_sends_it(workspace, binding, clock):
    schedule = every_minute(workspace, enabled=False)

    clock.move_to(at(10, 1, 0))
    schedule_fire(schedule_pk=schedule.pk)

    assert scheduler_events(workspace) == []


# --- beat ----------------------------------------------------------------------------------------------


class RecordingScheduler(DatabaseScheduler):
    """The real DatabaseScheduler whose sends are kept in a list instead of going to the broker."""

    producer = None  # no broker connection

    def __init__(self, sent: list[tuple[str, list[int]]]) -> None:
        self.sent = sent
        self.fired = 0
        super().__init__(app=celery_app)
        # Beat syncs at process exit; here the test says when (`sync()`, or never for a killed beat).
        self._finalize.cancel()

    def apply_async(self, entry, producer=None, advance=True, **kwargs):
        self.sent.append((entry.task, list(entry.args)))


@pytest.fixture
def beat_in_test_transaction(monkeypatch):
    # Beat closes stale connections between ticks; inside the test's transaction that would end it.
    monkeypatch.setattr("django_celery_beat.schedulers.close_old_connections", lambda: None)


def run_beat(beat: RecordingScheduler, clock: time_machine.Traveller, until: datetime) -> None:
    """Let beat run up to `until` (5-second steps), then run what it sent as a worker would."""
    while True:
        for _ in range(20):  # one due entry per tick() call
            if beat.tick() != 0:
                break
        fires = [args for task, args in beat.sent if task == "platforms.schedules.tasks.schedule_fire"]
        beat.sent[:] = [s for s in beat.sent if s[0] != "platforms.schedules.tasks.schedule_fire"]
        for args in fires:
            schedule_fire_task(*args)
            beat.fired += 1
        if datetime.now(UTC) >= until:
            return
        clock.shift(timedelta(seconds=5))


def crash(beat: RecordingScheduler) -> None:
    """The process is killed: nothing of what it did since its last sync reaches the database."""
    beat._dirty.clear()


def test_every_minute_fires_once_per_tick_across_two_beat_restarts(workspace, binding, clock, beat_in_test_transaction):
    # Given a schedule due every minute, created at 10:00:30
    every_minute(workspace)
    sent: list[tuple[str, list[int]]] = []
    beats = []

    # When beat runs through 10:01 and is killed, restarts and runs through 10:02 and is killed again,
    # restarts and runs through 10:03 and stops cleanly, and starts once more
    for until in (at(10, 1, 10), at(10, 2, 10), at(10, 3, 10)):
        beat = RecordingScheduler(sent)
        beats.append(beat)
        run_beat(beat, clock, until)
        crash(beat) if until < at(10, 3) else beat.sync()
        clock.shift(timedelta(seconds=5))
    last = RecordingScheduler(sent)
    run_beat(last, clock, at(10, 3, 55))

    # Then each beat restarted after a kill re-sent the tick its predecessor had sent already, the one
    # started after a clean stop did not...
    assert [b.fired for b in beats] == [1, 2, 2]
    assert last.fired == 0
    # ...and every tick is one event and one run
    assert [e.event_time for e in scheduler_events(workspace)] == [at(10, 1), at(10, 2), at(10, 3)]
    assert Run.objects.filter(workspace=workspace).count() == 3
    # and beat's own entry from the settings (the sweeper) ran beside them under the database scheduler
    assert any(task == "runners.tasks.runs_sweep" for task, _ in sent)


def test_deleting_the_bot_deletes_its_schedules_and_beat_drops_their_entry_at_the_next_send(workspace, clock):
    BotFactory.create(workspace=workspace, bot_id="news-bot")
    schedule = every_minute(workspace)
    task_pk = schedule.periodic_task_id

    bot_delete(bot=Bot.objects.get(bot_id="news-bot"))
    clock.move_to(at(10, 1, 0))
    schedule_fire_task(schedule.pk)  # beat had not reloaded yet

    assert not Schedule.objects.filter(pk=schedule.pk).exists()
    assert not PeriodicTask.objects.filter(pk=task_pk).exists()
    assert scheduler_events(workspace) == []
