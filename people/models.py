"""The people of a workspace: `Person`, the platform identities linked to them (`PersonIdentity`), the one-time
codes a user links a second channel with (`LinkCode`, `LinkAttempt`) and the audit of what was done with a
person's data (`PersonAudit`, kept after an erasure)."""

from __future__ import annotations

import uuid

from django.db import models
from django.utils.translation import gettext_lazy as _

from bindings.models import Workspace


class Person(models.Model):
    """One human in a workspace, whatever channel they write from."""

    person_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False, verbose_name=_("person id"))
    workspace = models.ForeignKey(
        Workspace, on_delete=models.CASCADE, related_name="persons", verbose_name=_("workspace")
    )
    display_name = models.CharField(_("display name"), max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))
    # When one of their identities last wrote: the retention sweep forgets people silent for longer than
    # the workspace keeps person data.
    last_seen_at = models.DateTimeField(null=True, blank=True, db_index=True, verbose_name=_("last seen at"))

    class Meta:
        verbose_name = _("person")
        verbose_name_plural = _("persons")

    def __str__(self) -> str:
        return self.display_name or str(self.person_id)


class PersonIdentity(models.Model):
    """An actor on one channel: `channel` is the bot's platform (`telegram`, `slack` …) or the event's source
    for events without a bot (`webui` for the web chat, `api`); `actor_type`/`actor_id` as the events name
    them. One identity belongs to one person."""

    workspace = models.ForeignKey(
        Workspace, on_delete=models.CASCADE, related_name="person_identities", verbose_name=_("workspace")
    )
    person = models.ForeignKey(Person, on_delete=models.CASCADE, related_name="identities", verbose_name=_("person"))
    channel = models.CharField(_("channel"), max_length=32)
    actor_type = models.CharField(_("actor type"), max_length=64, default="user")
    actor_id = models.CharField(_("actor id"), max_length=255)
    actor_name = models.CharField(_("actor name"), max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["workspace", "channel", "actor_type", "actor_id"], name="uniq_person_identity"
            )
        ]
        verbose_name = _("identity")
        verbose_name_plural = _("identities")

    def __str__(self) -> str:
        return f"{self.channel}:{self.actor_type}:{self.actor_id}"


class LinkCode(models.Model):
    """A one-time code a person asked for on one channel, to be entered on another. Only its hash is kept."""

    workspace = models.ForeignKey(
        Workspace, on_delete=models.CASCADE, related_name="link_codes", verbose_name=_("workspace")
    )
    person = models.ForeignKey(Person, on_delete=models.CASCADE, related_name="link_codes", verbose_name=_("person"))
    identity = models.ForeignKey(
        PersonIdentity, on_delete=models.CASCADE, related_name="link_codes", verbose_name=_("identity")
    )
    code_hash = models.CharField(max_length=64, verbose_name=_("code hash"))
    created_at = models.DateTimeField(auto_now_add=True, db_index=True, verbose_name=_("created at"))
    expires_at = models.DateTimeField(verbose_name=_("expires at"))
    used_at = models.DateTimeField(null=True, blank=True, verbose_name=_("used at"))

    class Meta:
        verbose_name = _("link code")
        verbose_name_plural = _("link codes")
        constraints = [models.UniqueConstraint(fields=["workspace", "code_hash"], name="uniq_link_code")]

    def __str__(self) -> str:
        return f"link code of {self.identity_id} until {self.expires_at:%Y-%m-%d %H:%M}"


class LinkAttempt(models.Model):
    """A code entered that matched nothing: counted per identity, so guessing is slowed to a few tries."""

    workspace = models.ForeignKey(
        Workspace, on_delete=models.CASCADE, related_name="link_attempts", verbose_name=_("workspace")
    )
    channel = models.CharField(max_length=32, verbose_name=_("channel"))
    actor_key = models.CharField(max_length=320, verbose_name=_("actor key"))
    created_at = models.DateTimeField(auto_now_add=True, db_index=True, verbose_name=_("created at"))

    class Meta:
        verbose_name = _("link attempt")
        verbose_name_plural = _("link attempts")

    def __str__(self) -> str:
        return f"{self.channel} {self.actor_key}"


class PersonAudit(models.Model):
    """Who looked at, exported, merged, linked or erased a person's data, and what it came to. `person_id` is a
    plain id: the row outlives the person it names."""

    class Action(models.TextChoices):
        VIEWED = "viewed", _("viewed")
        EXPORTED = "exported", _("exported")
        ERASED = "erased", _("erased")
        MERGED = "merged", _("merged")
        LINKED = "linked", _("linked")
        RETENTION = "retention", _("erased by retention")

    workspace = models.ForeignKey(
        Workspace, on_delete=models.CASCADE, related_name="person_audits", verbose_name=_("workspace")
    )
    person_id = models.UUIDField(db_index=True, verbose_name=_("person id"))
    action = models.CharField(_("action"), max_length=16, choices=Action.choices)
    actor = models.CharField(_("by"), max_length=200, blank=True)
    detail = models.JSONField(_("detail"), default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))

    class Meta:
        verbose_name = _("person audit entry")
        verbose_name_plural = _("person audit")

    def __str__(self) -> str:
        return f"{self.action} {self.person_id}"
