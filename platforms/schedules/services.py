"""Writes for schedules, shared by the REST API and the admin: create, update and delete a schedule with
the beat rows it owns kept in step (`PeriodicTask` + `CrontabSchedule`, written here rather than by
signals), and fire one tick through the Event Gateway (`schedule_fire`).

A tick is posted at most once, whatever beat does: beat re-sends a tick after a restart that lost its
`last_run_at` (kill, crash), and sends a missed tick late once it is back. Each firing claims its tick
with a conditional UPDATE of `last_fired_at` (only a later tick than the last one posted wins), and the
event's id is derived from the schedule and the tick, so even a claim lost to a rolled-back transaction
cannot post the same tick twice: the gateway answers an event id it has seen as a duplicate.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone
from django_celery_beat.models import CrontabSchedule, PeriodicTask
from pydantic import ValidationError

from bindings.models import AgentBinding, Bot, Workspace
from bindings.selectors import BindingResolution, bindings_visible, bot_get
from foundation.api_errors import FieldsRefusedError, field_errors
from foundation.ids import free_slug
from gateway.envelope import EventEnvelopeIn, EventSource
from gateway.services import EventRefusedError, conversation_id_derive, event_ingest
from platforms.schedules.cron import cron_parse, cron_tick_at_or_before, timezone_parse
from platforms.schedules.models import Schedule
from platforms.schedules.specs import ScheduleIn, SchedulePatchIn

logger = logging.getLogger(__name__)

FIRE_TASK = "platforms.schedules.tasks.schedule_fire"
# A firing belongs to the latest tick at or before now plus this much: beat sends a tick when its clock
# reaches it, and a worker whose clock runs a little behind must still see that tick, not the one before.
TICK_LOOKAHEAD = timedelta(seconds=2)
PATCH_NULLABLE = frozenset({"bot_id", "binding_id", "chat_id", "conversation_id"})


class ScheduleValidationError(FieldsRefusedError):
    """Field-level problems with a schedule: `{"field": message}`."""


@dataclass(frozen=True)
class ScheduleFiring:
    """What one firing did. `event_id` is None when nothing was posted for the tick by this firing."""

    tick: datetime | None
    event_id: str | None = None
    error: str = ""


def periodic_task_name(schedule_pk: int) -> str:
    return f"schedule:{schedule_pk}"


def schedule_event_id(*, schedule: Schedule, tick: datetime) -> str:
    """The event id of one tick: the same tick always gives the same id."""
    return f"schedule:{schedule.schedule_id}:{tick.astimezone(UTC):%Y%m%dT%H%MZ}"


def schedule_conversation_id(schedule: Schedule) -> str:
    """The conversation of the schedule's events: as given; else, posting to a bot's chat, that chat's
    conversation as the gateway names it (the scheduled message joins the chat's history); else its own."""
    if schedule.conversation_id:
        return schedule.conversation_id
    bot_id = _bot_id_of(schedule)
    if bot_id and schedule.chat_id:
        return conversation_id_derive(event_id="", bot_id=bot_id, data={"chat_id": schedule.chat_id}, actor_id=None)
    return f"schedule:{schedule.schedule_id}"


def _bot_id_of(schedule: Schedule) -> str | None:
    """The bot the events name: the schedule's, else the one its bot-scoped binding belongs to."""
    if schedule.bot is not None:
        return schedule.bot.bot_id
    binding = schedule.binding
    if binding is not None and binding.scope_type == AgentBinding.ScopeType.BOT:
        return binding.scope_id
    return None


# --- create, update, delete ----------------------------------------------------------------------------


def schedule_targets_resolve(*, workspace: Workspace, spec: ScheduleIn) -> tuple[Bot | None, AgentBinding | None]:
    """The schedule's bot and binding in `workspace`, or the fields that cannot be (another workspace's
    bot is refused as one this workspace does not have), with the checks across fields."""
    errors: dict[str, str] = {}
    if spec.bot_id is None and spec.binding_id is None:
        errors["bot_id"] = "Give bot_id, binding_id or both: the schedule needs something to post to."
    if spec.event_type.startswith("message.") and not spec.input_text.strip():
        errors["input_text"] = "A message event needs text."
    bot = bot_get(workspace=workspace, bot_id=spec.bot_id) if spec.bot_id else None
    if spec.bot_id and bot is None:
        errors["bot_id"] = f"No bot {spec.bot_id!r} in this workspace."
    binding = None
    if spec.binding_id:
        # The workspace's own binding before a global one of the same id.
        binding = min(
            bindings_visible(workspace=workspace).filter(binding_id=spec.binding_id),
            key=lambda b: b.workspace_id is None,
            default=None,
        )
        if binding is None:
            errors["binding_id"] = f"No binding {spec.binding_id!r} in this workspace."
        elif binding.scope_type == AgentBinding.ScopeType.BOT and spec.bot_id and binding.scope_id != spec.bot_id:
            errors["binding_id"] = (
                f"Binding {spec.binding_id!r} is scoped to bot {binding.scope_id!r}, not {spec.bot_id!r}."
            )
    if errors:
        raise ScheduleValidationError(errors)
    return bot, binding


def schedule_apply(*, schedule: Schedule, spec: ScheduleIn) -> Schedule:
    """Give `schedule` (new, or stored) the values of `spec`, save it and bring its beat rows in step."""
    bot, binding = schedule_targets_resolve(workspace=schedule.workspace, spec=spec)
    # Compared with the stored row: the admin's form has already put its values on `schedule`.
    stored = Schedule.objects.filter(pk=schedule.pk).values("cron", "timezone", "enabled").first()
    timing_changed = (
        stored is None
        or stored["cron"] != spec.cron
        or stored["timezone"] != spec.timezone
        or (spec.enabled and not stored["enabled"])
    )
    schedule.name = spec.name
    schedule.cron = spec.cron
    schedule.timezone = spec.timezone
    schedule.enabled = spec.enabled
    schedule.bot = bot
    schedule.binding = binding
    schedule.event_type = spec.event_type
    schedule.input_text = spec.input_text
    schedule.chat_id = spec.chat_id or ""
    schedule.conversation_id = spec.conversation_id or ""
    with transaction.atomic():
        try:
            with transaction.atomic():
                schedule.save()
        except IntegrityError as exc:
            raise ScheduleValidationError(
                {"schedule_id": f"{schedule.schedule_id!r} already exists in this workspace."}
            ) from exc
        _beat_rows_sync(schedule, restart=timing_changed)
    return schedule


def _beat_rows_sync(schedule: Schedule, *, restart: bool) -> None:
    """Write the schedule's `CrontabSchedule` (its own row, never shared) and `PeriodicTask`. Saving them
    marks beat's schedule changed (django-celery-beat's `PeriodicTasks`), so a running beat reloads it."""
    fields = cron_parse(schedule.cron)
    # Found by name too: a row whose link was cut (its schedule's reference set null) is taken back.
    task = schedule.periodic_task or PeriodicTask.objects.filter(name=periodic_task_name(schedule.pk)).first()
    crontab = task.crontab if task is not None and task.crontab is not None else CrontabSchedule()
    crontab.minute = fields.minute
    crontab.hour = fields.hour
    crontab.day_of_month = fields.day_of_month
    crontab.month_of_year = fields.month_of_year
    crontab.day_of_week = fields.day_of_week
    crontab.timezone = timezone_parse(schedule.timezone)
    crontab.save()
    if task is None:
        task = PeriodicTask(name=periodic_task_name(schedule.pk), task=FIRE_TASK)
    task.crontab = crontab
    task.args = json.dumps([schedule.pk])
    task.kwargs = "{}"
    task.enabled = schedule.enabled
    task.description = f"Scheduled event {schedule.workspace.slug}/{schedule.schedule_id} (managed by the schedule)"
    if restart:
        # Beat counts from the row's change time, not from a run under the old timing: a changed or
        # re-enabled schedule never fires at once for a tick that passed before the change.
        task.last_run_at = None
    task.save()
    if schedule.periodic_task_id != task.pk:
        schedule.periodic_task = task
        Schedule.objects.filter(pk=schedule.pk).update(periodic_task=task)


@transaction.atomic
def schedule_create(*, workspace: Workspace, spec: ScheduleIn) -> Schedule:
    def taken(schedule_id: str) -> bool:
        return Schedule.objects.filter(workspace=workspace, schedule_id=schedule_id).exists()

    if spec.schedule_id is not None and taken(spec.schedule_id):
        raise ScheduleValidationError({"schedule_id": f"{spec.schedule_id!r} already exists in this workspace."})
    schedule_id = spec.schedule_id or free_slug(base=spec.name, taken=taken, fallback="schedule")
    return schedule_apply(schedule=Schedule(workspace=workspace, schedule_id=schedule_id), spec=spec)


def schedule_fields(schedule: Schedule) -> dict[str, Any]:
    """A schedule as its input shape (`ScheduleIn` without the id): what a PATCH merges into."""
    return {
        "name": schedule.name,
        "cron": schedule.cron,
        "timezone": schedule.timezone,
        "enabled": schedule.enabled,
        "bot_id": schedule.bot.bot_id if schedule.bot else None,
        "binding_id": schedule.binding.binding_id if schedule.binding else None,
        "event_type": schedule.event_type,
        "input_text": schedule.input_text,
        "chat_id": schedule.chat_id or None,
        "conversation_id": schedule.conversation_id or None,
    }


@transaction.atomic
def schedule_update(*, schedule: Schedule, patch: SchedulePatchIn) -> Schedule:
    """Apply a PATCH: given keys replace stored ones; the result is validated as a whole schedule."""
    given_nulls = [name for name in patch.model_fields_set - PATCH_NULLABLE if getattr(patch, name) is None]
    nulls = dict.fromkeys(given_nulls, "May not be null.")
    if nulls:
        raise ScheduleValidationError(nulls)
    if patch.schedule_id is not None and patch.schedule_id != schedule.schedule_id:
        raise ScheduleValidationError({"schedule_id": "A schedule's id cannot be changed."})
    given = patch.model_dump(mode="json", include=patch.model_fields_set - {"schedule_id"})
    try:
        spec = ScheduleIn.model_validate({**schedule_fields(schedule), **given})
    except ValidationError as exc:
        raise ScheduleValidationError(field_errors(exc)) from None
    return schedule_apply(schedule=schedule, spec=spec)


@transaction.atomic
def schedule_delete(*, schedule: Schedule) -> None:
    """Delete the schedule and its beat rows; beat drops the entry when it next reloads."""
    task = schedule.periodic_task
    schedule.delete()
    if task is not None:
        _periodic_task_delete(task)


def _periodic_task_delete(task: PeriodicTask) -> None:
    crontab = task.crontab
    task.delete()
    if crontab is not None and not PeriodicTask.objects.filter(crontab=crontab).exists():
        crontab.delete()


# --- firing --------------------------------------------------------------------------------------------


def schedule_fire(*, schedule_pk: int, now: datetime | None = None) -> ScheduleFiring:
    """Post the event of the schedule's latest tick at or before `now` (default: the clock), unless that
    tick was posted already. Called by beat's task; running it twice for one tick posts one event.

    A target that cannot take the event (a disabled bot or binding, no binding for the bot's events) is
    recorded in `last_error`; the tick counts as fired, so the next tick is the next try.
    """
    schedule = Schedule.objects.select_related("workspace", "bot", "binding").filter(pk=schedule_pk).first()
    if schedule is None:
        # Beat's row outlived its schedule: deleting a bot or binding deletes their schedules in cascade,
        # below the services. The first firing after that removes the row.
        for orphan in PeriodicTask.objects.filter(name=periodic_task_name(schedule_pk), task=FIRE_TASK):
            _periodic_task_delete(orphan)
        return ScheduleFiring(tick=None)
    if not schedule.enabled:
        return ScheduleFiring(tick=None)  # sent by a beat that had not yet seen the change
    moment = (now or timezone.now()) + TICK_LOOKAHEAD
    tick = cron_tick_at_or_before(cron_parse(schedule.cron), timezone_parse(schedule.timezone), moment)
    if tick is None:
        return ScheduleFiring(tick=None)
    tick = tick.astimezone(UTC)
    event_id = schedule_event_id(schedule=schedule, tick=tick)
    with transaction.atomic():
        claimed = (
            Schedule.objects.filter(pk=schedule.pk)
            .filter(Q(last_fired_at__isnull=True) | Q(last_fired_at__lt=tick))
            .update(last_fired_at=tick, last_event_id=event_id)
        )
        if not claimed:
            return ScheduleFiring(tick=tick)
        error = _post(schedule, tick=tick, event_id=event_id)
        Schedule.objects.filter(pk=schedule.pk).update(
            last_error=error, **({"last_error_at": timezone.now()} if error else {})
        )
    if error:
        logger.warning("schedule %s: tick %s not posted: %s", schedule, tick.isoformat(), error)
        return ScheduleFiring(tick=tick, error=error)
    return ScheduleFiring(tick=tick, event_id=event_id)


def _post(schedule: Schedule, *, tick: datetime, event_id: str) -> str:
    """Post one tick's event through the gateway; the error text, or "" once it is in."""
    bot_id = _bot_id_of(schedule)
    resolution = None
    binding = schedule.binding
    if binding is not None:
        if not binding.enabled:
            return f"Binding {binding.binding_id!r} is disabled."
        # The schedule names its binding: it runs, whatever the binding's event types say.
        resolution = BindingResolution(replying=binding) if binding.replies else BindingResolution(observers=[binding])
    try:
        envelope = EventEnvelopeIn.model_validate(
            {
                "event_id": event_id,
                "event_type": schedule.event_type,
                "source": EventSource.SCHEDULER,
                "bot_id": bot_id,
                "conversation_id": schedule_conversation_id(schedule),
                "actor": {"actor_type": "system", "actor_id": "scheduler", "actor_name": "Scheduler"},
                "subject": {
                    "subject_type": "schedule",
                    "subject_id": schedule.schedule_id,
                    "data": {"name": schedule.name, "cron": schedule.cron, "timezone": schedule.timezone},
                },
                "input": {"text": schedule.input_text or None},
                "data": {
                    "schedule_id": schedule.schedule_id,
                    "scheduled_at": tick.isoformat(),
                    # Where a platform adapter delivers the reply (platforms.interface.ReplyTarget).
                    **({"chat_id": schedule.chat_id} if schedule.chat_id else {}),
                },
                "event_time": tick,
            }
        )
        with transaction.atomic():
            result = event_ingest(workspace=schedule.workspace, envelope=envelope, resolution=resolution)
    except ValidationError as exc:
        return "; ".join(f"{field}: {message}" for field, message in field_errors(exc).items())
    except EventRefusedError as exc:
        return str(exc)
    if result.event.error:
        return str(result.event.error.get("message", ""))
    if not result.runs and not result.duplicate:
        return f"No binding handles {schedule.event_type!r} events{f' of bot {bot_id!r}' if bot_id else ''}."
    return ""
