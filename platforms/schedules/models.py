"""Scheduled events: a cron expression in a time zone that posts one event through the gateway per tick.

A `Schedule` owns the django-celery-beat rows beat reads (`periodic_task` and its own `CrontabSchedule`);
`platforms.schedules.services` keeps them in step with the schedule, so beat's admin pages are a view of
them, not a place to edit them.
"""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _
from django_celery_beat.models import PeriodicTask

from bindings.models import AgentBinding, Bot, Workspace


class Schedule(models.Model):
    """Posts `input_text` as an event of `event_type` (`source: scheduler`) to `bot`, to `binding`, or to
    the binding a bot's events route to, at every tick of `cron` read in `timezone`."""

    workspace = models.ForeignKey(
        Workspace, on_delete=models.CASCADE, related_name="schedules", verbose_name=_("workspace")
    )
    schedule_id = models.SlugField(max_length=64, verbose_name=_("schedule id"))
    name = models.CharField(max_length=200, blank=True, verbose_name=_("name"))
    cron = models.CharField(
        max_length=200,
        help_text=_("Five fields: minute hour day-of-month month day-of-week, e.g. `0 9 * * mon-fri`."),
        verbose_name=_("cron"),
    )
    timezone = models.CharField(
        max_length=64, default="UTC", help_text=_("An IANA time zone, e.g. Europe/Berlin."), verbose_name=_("timezone")
    )
    enabled = models.BooleanField(default=True, verbose_name=_("enabled"))
    # A schedule without its bot or binding has nothing to post to: it goes with them.
    bot = models.ForeignKey(
        Bot, on_delete=models.CASCADE, null=True, blank=True, related_name="schedules", verbose_name=_("bot")
    )
    binding = models.ForeignKey(
        AgentBinding,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="schedules",
        verbose_name=_("binding"),
    )
    event_type = models.CharField(max_length=100, default="message.received", verbose_name=_("event type"))
    input_text = models.TextField(blank=True, verbose_name=_("input text"))
    chat_id = models.CharField(
        max_length=255,
        blank=True,
        help_text=_("The bot's chat the reply goes to on its platform (the event's `data.chat_id`)."),
        verbose_name=_("chat id"),
    )
    conversation_id = models.CharField(
        max_length=255,
        blank=True,
        help_text=_(
            "Empty: the chat's conversation (`bot:<bot_id>:<chat_id>`) with a bot and a chat, else the "
            "schedule's own, `schedule:<schedule_id>`."
        ),
        verbose_name=_("conversation id"),
    )
    # Beat's row; null only while it is being (re)made. A deleted schedule's row is deleted with it.
    periodic_task = models.OneToOneField(
        PeriodicTask,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="langbot_schedule",
        verbose_name=_("periodic task"),
    )
    last_fired_at = models.DateTimeField(
        _("last tick posted"),
        null=True,
        blank=True,
        help_text=_("When the last tick that posted an event was due by the schedule (not when it was sent)."),
    )
    last_event_id = models.CharField(max_length=200, blank=True, verbose_name=_("last event id"))
    last_error = models.TextField(blank=True, verbose_name=_("last error"))
    last_error_at = models.DateTimeField(null=True, blank=True, verbose_name=_("last error at"))
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))
    updated_at = models.DateTimeField(auto_now=True, verbose_name=_("updated at"))

    class Meta:
        verbose_name = _("schedule")
        verbose_name_plural = _("schedules")
        ordering = ["workspace", "schedule_id"]
        constraints = [models.UniqueConstraint(fields=["workspace", "schedule_id"], name="uniq_schedule_per_workspace")]

    def __str__(self) -> str:
        return f"{self.workspace}/{self.schedule_id}"
