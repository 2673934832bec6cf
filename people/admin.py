"""Admin of people (README "People"): a person's page lists their identities (an operator links one by adding
it; an identity another person holds moves here with that person's data when it was their only one) and
everything stored about them; the list's actions merge persons into the oldest selected and erase persons'
data (after a confirmation page); the export link downloads their archive. Viewing a person's page,
exporting and erasing are audited (Person audit, read-only)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.forms.models import BaseInlineFormSet
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from bindings.admin_scope import WorkspaceScopedAdmin
from bindings.roles import request_may
from people.data import person_audit, person_erase, person_export_stream, person_inventory
from people.models import Person, PersonAudit, PersonIdentity
from people.services import ActorRef, identity_link, persons_merge
from transcripts.admin import ReadOnlyWorkspaceAdmin, pretty_json


def _caller(request: HttpRequest) -> str:
    return request.user.get_username()


class IdentityForm(forms.ModelForm[PersonIdentity]):
    class Meta:
        model = PersonIdentity
        fields = ["channel", "actor_type", "actor_id", "actor_name"]


class IdentityFormSet(BaseInlineFormSet[PersonIdentity, Person, forms.ModelForm[PersonIdentity]]):
    def save_new(self, form: forms.ModelForm[Any], commit: bool = True) -> PersonIdentity:
        # An identity is linked through the service: one another person holds moves here (with their data).
        person: Person = self.instance
        data = form.cleaned_data
        return identity_link(
            person=person,
            actor=ActorRef(
                channel=data["channel"],
                actor_type=data.get("actor_type") or "user",
                actor_id=data["actor_id"],
                actor_name=data.get("actor_name") or "",
            ),
            by=getattr(self, "operator", ""),
        )


class IdentityInline(admin.TabularInline[PersonIdentity, Person]):
    model = PersonIdentity
    form = IdentityForm
    formset = IdentityFormSet
    extra = 0
    readonly_fields = ["created_at"]

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # An identity is moved by linking it again to another person, never edited in place.
        return False

    def get_formset(self, request: HttpRequest, obj: Any = None, **kwargs: Any) -> Any:
        formset = super().get_formset(request, obj, **kwargs)
        # Whoever links an identity is named in the person audit.
        return type(formset.__name__, (formset,), {"operator": _caller(request)})


@admin.register(Person)
class PersonAdmin(WorkspaceScopedAdmin[Person]):
    list_display = ["__str__", "workspace", "identities_display", "last_seen_at", "created_at"]
    list_filter = ["workspace"]
    search_fields = ["display_name", "identities__actor_id", "identities__actor_name"]
    readonly_fields = ["person_id", "stored_display", "export_link", "created_at", "last_seen_at"]
    fields = ["workspace", "display_name", "person_id", "export_link", "stored_display", "created_at", "last_seen_at"]
    fixed_fields = ("workspace",)
    inlines = [IdentityInline]
    actions = ["merge_persons", "erase_persons"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Person]:
        return super().get_queryset(request).prefetch_related("identities")

    @admin.display(description=_("identities"))
    def identities_display(self, obj: Person) -> str:
        return ", ".join(str(i) for i in obj.identities.all())

    @admin.display(description=_("stored about them"))
    def stored_display(self, obj: Person) -> SafeString | str:
        if obj.pk is None:
            return "-"
        inventory = person_inventory(obj)
        counts = format_html_join(
            "", "<li>{}: {}</li>", ((gettext(name.replace("_", " ")), n) for name, n in inventory["counts"].items())
        )
        return format_html(
            "<ul>{}</ul><p><b>{}</b></p>{}<p><b>{}</b></p>{}",
            counts,
            gettext("Memory"),
            pretty_json(inventory["memory"]),
            gettext("Usage"),
            pretty_json(inventory["usage"]),
        )

    @admin.display(description=_("export"))
    def export_link(self, obj: Person) -> SafeString | str:
        if obj.pk is None:
            return "-"
        url = reverse("admin:people_person_export", args=[obj.pk])
        return format_html('<a href="{}">{}</a>', url, gettext("Download everything stored about them (zip)"))

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        response = super().change_view(request, object_id, form_url, extra_context)
        if request.method == "GET" and response.status_code == 200:
            person = self.get_queryset(request).filter(pk=object_id).first() if object_id.isdigit() else None
            if person is not None:
                person_audit(person=person, action=PersonAudit.Action.VIEWED, by=_caller(request))
        return response

    def get_urls(self) -> list[URLPattern]:
        extra = [
            path(
                "<int:pk>/export/",
                self.admin_site.admin_view(self.export_view),
                name="people_person_export",
            ),
        ]
        return extra + super().get_urls()

    def export_view(self, request: HttpRequest, pk: int) -> StreamingHttpResponse:
        person = get_object_or_404(self.get_queryset(request), pk=pk)
        if not request_may(request, "persons:write", person.workspace_id):
            raise PermissionDenied
        response = StreamingHttpResponse(
            person_export_stream(person, by=_caller(request)), content_type="application/zip"
        )
        response["Content-Disposition"] = f'attachment; filename="person-{person.person_id}.zip"'
        return response

    def _writable(self, request: HttpRequest, queryset: QuerySet[Person]) -> bool:
        return all(request_may(request, "persons:write", p.workspace_id) for p in queryset)

    @admin.action(description=_("Merge the selected persons into the oldest of them"))
    def merge_persons(self, request: HttpRequest, queryset: QuerySet[Person]) -> None:
        persons = list(queryset.order_by("pk"))
        if len(persons) < 2 or len({p.workspace_id for p in persons}) > 1:
            self.message_user(request, gettext("Pick two or more persons of one workspace."), messages.ERROR)
            return
        if not self._writable(request, queryset):
            raise PermissionDenied
        target = persons[0]
        for other in persons[1:]:
            target = persons_merge(target=target, other=other, by=_caller(request))
        self.message_user(request, gettext("Merged into %(person)s.") % {"person": target}, messages.SUCCESS)

    @admin.action(description=_("Erase the selected persons' data"))
    def erase_persons(self, request: HttpRequest, queryset: QuerySet[Person]) -> HttpResponse | None:
        if not self._writable(request, queryset):
            raise PermissionDenied
        if request.POST.get("confirmed") != "yes":
            return TemplateResponse(
                request,
                "admin/people/person/erase_confirmation.html",
                {
                    **self.admin_site.each_context(request),
                    "title": gettext("Erase these persons' data?"),
                    "persons": list(queryset),
                    "opts": self.model._meta,
                    "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
                },
            )
        erased = 0
        for person in list(queryset):
            person_erase(person, by=_caller(request))
            erased += 1
        self.message_user(
            request,
            ngettext("Erased %(n)d person's data.", "Erased %(n)d persons' data.", erased) % {"n": erased},
            messages.SUCCESS,
        )
        return None


@admin.register(PersonAudit)
class PersonAuditAdmin(ReadOnlyWorkspaceAdmin[PersonAudit]):
    list_display = ["created_at", "workspace", "person_id", "action", "actor"]
    list_filter = ["action", "workspace"]
    search_fields = ["person_id", "actor"]
