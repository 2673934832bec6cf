"""Admin of knowledge bases: the knowledge base's fields, an upload field that adds a document (ingested by
a worker, as over REST), and its documents inline with their status (coloured), progress, error and chunk
count. Removing a document inline deletes its chunks and artifact as the API does; deleting a knowledge
base deletes everything of it.

The knowledge base's page has a hit test below its form (`resources.knowledge.hit_test`, as
`POST /api/v1/knowledge-bases/{kb_id}/search`): a query box, and the ranked chunks with their scores and
documents. A file the knowledge base already holds (the same bytes) is refused on upload, naming the
document it repeats.

Superusers see everything; other staff see and edit only the knowledge bases of workspaces they belong to,
and may only pick embedding models of those workspaces.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.utils.html import format_html
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from bindings.admin_scope import WorkspaceScopedAdmin
from resources.knowledge.hit_test import SEARCH_MODES, HitTestError, knowledge_base_hit_test
from resources.knowledge.parsing import document_type
from resources.knowledge.search import MAX_TOP_K
from resources.knowledge.services import (
    DocumentDuplicateError,
    DocumentTypeUnsupportedError,
    knowledge_base_delete,
    knowledge_document_delete,
    knowledge_document_duplicate,
    knowledge_document_upload,
    upload_sha256,
)
from resources.models import KnowledgeBase, KnowledgeDocument, Model

_STATUS_COLOURS = {
    KnowledgeDocument.Status.QUEUED: "#6c757d",
    KnowledgeDocument.Status.PROCESSING: "#0d6efd",
    KnowledgeDocument.Status.READY: "#198754",
    KnowledgeDocument.Status.FAILED: "#dc3545",
}


class KnowledgeBaseAdminForm(forms.ModelForm[KnowledgeBase]):
    upload = forms.FileField(
        required=False,
        label=_("Add a document"),
        help_text=_("Text, Markdown, HTML, PDF or DOCX; ingested by a worker after saving."),
    )

    class Meta:
        model = KnowledgeBase
        fields = ["workspace", "kb_id", "name", "description", "embedding_model"]

    def clean_upload(self) -> Any:
        upload = self.cleaned_data.get("upload")
        if upload is None:
            return None
        limit = int(settings.KNOWLEDGE_DOCUMENT_MAX_BYTES)
        if upload.size > limit:
            raise forms.ValidationError(f"The file is {upload.size} bytes; the limit is {limit}.")
        if document_type(name=upload.name or "", mime_type=upload.content_type or "") is None:
            raise forms.ValidationError("Unsupported type: upload text, Markdown, HTML, PDF or DOCX.")
        if self.instance.pk is not None:
            existing = knowledge_document_duplicate(knowledge_base=self.instance, sha256=upload_sha256(upload))
            if existing is not None:
                raise forms.ValidationError(
                    gettext(
                        "This knowledge base already holds the same file as %(name)s; delete that one to upload "
                        "it again."
                    )
                    % {"name": existing.name}
                )
        return upload

    def clean(self) -> dict[str, Any] | None:
        cleaned = super().clean() or {}
        workspace = cleaned.get("workspace") or (self.instance.workspace if self.instance.workspace_id else None)
        model = cleaned.get("embedding_model")
        if model is not None:
            if model.kind != Model.Kind.EMBEDDING:
                self.add_error("embedding_model", "Pick a model of kind embedding.")
            elif workspace is not None and model.workspace_id != workspace.pk:
                self.add_error("embedding_model", "The model belongs to another workspace.")
        return cleaned


class KnowledgeDocumentInline(admin.TabularInline[KnowledgeDocument, KnowledgeBase]):
    model = KnowledgeDocument
    extra = 0
    fields = ["name", "status_coloured", "progress", "error", "chunk_count", "page_count", "created_at"]
    readonly_fields = ["name", "status_coloured", "progress", "error", "chunk_count", "page_count", "created_at"]
    can_delete = True
    show_change_link = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # documents come in through the upload field

    @admin.display(description=_("status"))
    def status_coloured(self, document: KnowledgeDocument) -> str:
        colour = _STATUS_COLOURS.get(KnowledgeDocument.Status(document.status), "#6c757d")
        return format_html('<strong style="color: {}">{}</strong>', colour, document.get_status_display())


@admin.register(KnowledgeBase)
class KnowledgeBaseAdmin(WorkspaceScopedAdmin[KnowledgeBase]):
    form = KnowledgeBaseAdminForm
    # The hit test below the form (a GET form of its own: a query changes nothing).
    change_form_template = "admin/resources/knowledgebase/change_form.html"
    inlines = [KnowledgeDocumentInline]
    list_display = ["kb_id", "workspace", "name", "embedding_model", "updated_at"]
    list_filter = ["workspace"]
    search_fields = ["kb_id", "name"]
    prepopulated_fields = {"kb_id": ["name"]}
    readonly_fields = ["created_at", "updated_at"]

    list_select_related = ["workspace", "embedding_model"]
    fixed_fields = ("workspace", "kb_id")
    scoped_foreign_keys = {"embedding_model": "workspace"}

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        field = super().formfield_for_foreignkey(db_field, request, **kwargs)
        if db_field.name == "embedding_model" and field is not None:
            field.queryset = field.queryset.filter(kind=Model.Kind.EMBEDDING)
        return field

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        context = {**(extra_context or {}), "hit_modes": SEARCH_MODES, "hit_top_k_max": MAX_TOP_K}
        # Through the admin's own queryset: a knowledge base of another workspace is not found here either.
        knowledge_base = self.get_object(request, unquote(object_id)) if request.method == "GET" else None
        query = request.GET.get("hit_query", "").strip()
        if knowledge_base is not None and query:
            context.update(hit_query=query, hit_mode=request.GET.get("hit_mode", ""))
            try:
                top_k = int(request.GET.get("hit_top_k") or 5)
            except ValueError:
                top_k = 0
            context["hit_top_k"] = top_k
            try:
                context["hit_test"] = knowledge_base_hit_test(
                    knowledge_base=knowledge_base, query=query, top_k=top_k, mode=request.GET.get("hit_mode") or None
                )
            except HitTestError as exc:
                context["hit_error"] = str(exc)
        return super().change_view(request, object_id, form_url, extra_context=context)

    def save_model(self, request: HttpRequest, obj: KnowledgeBase, form: Any, change: bool) -> None:
        super().save_model(request, obj, form, change)
        upload = form.cleaned_data.get("upload")
        if upload is not None:
            try:
                knowledge_document_upload(
                    knowledge_base=obj, file=upload, name=upload.name or "document", mime_type=upload.content_type or ""
                )
            except (DocumentTypeUnsupportedError, DocumentDuplicateError) as exc:
                messages.error(request, gettext("Not added: %(reason)s") % {"reason": exc})
                return
            messages.success(request, gettext("%(name)s is queued for ingestion.") % {"name": upload.name})

    def save_formset(self, request: HttpRequest, form: Any, formset: Any, change: bool) -> None:
        # Deleted documents go through the service, which also removes their chunks and artifacts.
        formset.save(commit=False)
        for document in formset.deleted_objects:
            knowledge_document_delete(document=document)

    def delete_model(self, request: HttpRequest, obj: KnowledgeBase) -> None:
        knowledge_base_delete(knowledge_base=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[KnowledgeBase]) -> None:
        for knowledge_base in queryset:
            knowledge_base_delete(knowledge_base=knowledge_base)
