"""Admin for the development tokens (minted here, shown once, revocable) and the sessions of
`python -m langbot_sdk dev`: who has a development runtime connected, serving which runners."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.cache import cache
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone
from django.utils.html import format_html
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from bindings.admin_scope import WorkspaceScopedAdmin
from runtimes.dev_access import (
    DEV_TOKEN_DEFAULT_LIFETIME,
    DEV_TOKEN_MAX_LIFETIME,
    dev_session_alive_key,
    dev_session_close,
    dev_session_end_request,
    dev_token_create,
    dev_tokens_revoke,
)
from runtimes.models import DevelopmentSession, DevelopmentToken
from transcripts.admin import ReadOnlyWorkspaceAdmin


class DevelopmentTokenForm(forms.ModelForm[DevelopmentToken]):
    class Meta:
        model = DevelopmentToken
        fields = ["workspace", "name", "expires_at"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if "expires_at" in self.fields and self.instance.pk is None:
            self.fields["expires_at"].initial = timezone.now() + DEV_TOKEN_DEFAULT_LIFETIME
            days = DEV_TOKEN_MAX_LIFETIME.days
            self.fields["expires_at"].help_text = gettext(
                "Required, at most %(days)d days ahead: the token stops working then."
            ) % {"days": days}

    def clean_expires_at(self) -> Any:
        expires_at = self.cleaned_data["expires_at"]
        if self.instance.pk is None:
            now = timezone.now()
            if expires_at <= now:
                raise forms.ValidationError(gettext("Pick a time in the future."))
            if expires_at > now + DEV_TOKEN_MAX_LIFETIME:
                raise forms.ValidationError(
                    gettext("At most %(days)d days ahead.") % {"days": DEV_TOKEN_MAX_LIFETIME.days}
                )
        return expires_at


@admin.register(DevelopmentToken)
class DevelopmentTokenAdmin(WorkspaceScopedAdmin[DevelopmentToken]):
    """Tokens for `python -m langbot_sdk dev`: minted here (the plaintext shown once), revoked here."""

    form = DevelopmentTokenForm
    list_display = ["prefix", "workspace", "name", "state", "expires_at", "created_by", "last_used_at"]
    list_filter = ["workspace"]
    search_fields = ["prefix", "name"]
    readonly_fields = ["prefix", "state", "created_by", "created_at", "last_used_at", "revoked_at"]
    fields = [
        "workspace",
        "name",
        "prefix",
        "state",
        "expires_at",
        "created_by",
        "created_at",
        "last_used_at",
        "revoked_at",
    ]
    actions = ["revoke"]

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return ["workspace", "name", "expires_at"] if obj is None else self.fields

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        # A token's workspace and lifetime are what it was minted with; only its name may change.
        return [*self.readonly_fields, "workspace", "expires_at"] if obj else list(self.readonly_fields)

    @admin.display(description=_("state"))
    def state(self, obj: DevelopmentToken) -> str:
        if obj.revoked_at is not None:
            return gettext("revoked")
        return gettext("expired") if obj.expires_at <= timezone.now() else gettext("active")

    def save_model(self, request: HttpRequest, obj: DevelopmentToken, form: Any, change: bool) -> None:
        if change:
            super().save_model(request, obj, form, change)
            return
        token, plaintext = dev_token_create(
            workspace=obj.workspace, name=obj.name, expires_at=obj.expires_at, created_by=request.user
        )
        obj.pk, obj.prefix, obj.created_at = token.pk, token.prefix, token.created_at
        host = request.build_absolute_uri("/").rstrip("/")
        messages.warning(
            request,
            format_html(
                gettext(
                    "New development token for {} — copy it now, it is not stored and not shown again: "
                    "<code>{}</code><br>Connect a plugin directory: "
                    "<code>python -m langbot_sdk dev --host {} --token {}</code>"
                ),
                token.workspace.slug,
                plaintext,
                host,
                plaintext,
            ),
        )

    @admin.action(description=_("Revoke selected tokens (disconnects their sessions)"))
    def revoke(self, request: HttpRequest, queryset: QuerySet[DevelopmentToken]) -> None:
        count = dev_tokens_revoke(tokens=queryset)
        messages.success(request, gettext("Revoked %(count)d token(s).") % {"count": count})


@admin.register(DevelopmentSession)
class DevelopmentSessionAdmin(ReadOnlyWorkspaceAdmin[DevelopmentSession]):
    """Who has a development runtime connected, since when, serving which runners."""

    list_display = ["session_short", "workspace", "token", "state", "peer", "runners", "connected_at", "ended_at"]
    list_filter = [("ended_at", admin.EmptyFieldListFilter), "workspace"]
    list_select_related = ["workspace", "token"]
    search_fields = ["session_id", "peer"]
    fields = readonly_fields = (
        "session_id", "workspace", "token", "state", "peer", "runners", "connected_at", "ended_at", "close_reason",
    )  # fmt: skip
    actions = ["disconnect"]

    @admin.display(description=_("session"))
    def session_short(self, obj: DevelopmentSession) -> str:
        return obj.session_id[:8]

    @admin.display(description=_("runners"))
    def runners(self, obj: DevelopmentSession) -> str:
        return ", ".join(obj.runner_ids or []) or "—"

    @admin.display(description=_("state"))
    def state(self, obj: DevelopmentSession) -> str:
        if obj.ended_at is not None:
            return gettext("ended")
        # A web process that stopped without closing leaves the row open; its heartbeat tells.
        alive = cache.get(dev_session_alive_key(obj.session_id)) is not None
        return gettext("connected") if alive else gettext("not answering")

    @admin.action(description=_("Disconnect selected sessions"))
    def disconnect(self, request: HttpRequest, queryset: QuerySet[DevelopmentSession]) -> None:
        live = list(queryset.filter(ended_at__isnull=True).values_list("session_id", flat=True))
        for session_id in live:
            # Ended here, so that one whose web process is gone ends too; a live one's CLI is told and stops.
            dev_session_close(session_id=session_id, reason=f"disconnected by {request.user}")
            dev_session_end_request(
                session_id=session_id, code="disconnected", message=f"disconnected by {request.user}"
            )
        messages.success(
            request,
            gettext("Disconnected %(count)d session(s); their runners are missing now.") % {"count": len(live)},
        )
