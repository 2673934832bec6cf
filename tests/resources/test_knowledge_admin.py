"""Admin of knowledge bases: the list and change pages render, documents are shown inline with their
status, progress and error, an upload in the change form queues the document's ingestion, removing a
document inline deletes its chunks, and staff see only their workspaces' knowledge bases."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from bindings.services import workspace_member_add
from resources.knowledge.ingestion import knowledge_document_ingest as ingest
from resources.knowledge.services import knowledge_document_upload
from resources.models import KnowledgeBase, KnowledgeChunk, KnowledgeDocument
from resources.tasks import knowledge_document_ingest
from tests.factories import ModelFactory, ModelProviderFactory, UserFactory, WorkspaceFactory
from tests.fakes.documents import pdf_bytes

pytestmark = pytest.mark.django_db

KBS_URL = "/admin/resources/knowledgebase/"


@pytest.fixture
def queued(monkeypatch) -> list[str]:
    """The document ids whose ingestion was sent to the broker."""
    sent: list[str] = []
    monkeypatch.setattr(knowledge_document_ingest, "delay", sent.append)
    return sent


@pytest.fixture
def admin_client(db) -> Client:
    client = Client()
    client.force_login(UserFactory.create(username="root", is_staff=True, is_superuser=True))
    return client


@pytest.fixture
def kb(workspace) -> KnowledgeBase:
    return KnowledgeBase.objects.create(workspace=workspace, kb_id="manuals", name="Manuals")


def document(kb: KnowledgeBase, name: str, data: bytes, *, ingested: bool = True) -> KnowledgeDocument:
    made = knowledge_document_upload(knowledge_base=kb, file=SimpleUploadedFile(name, data), name=name, mime_type="")
    if ingested:
        ingest(document_id=str(made.document_id))
    return KnowledgeDocument.objects.get(pk=made.pk)


def change_form(kb: KnowledgeBase, documents: list[KnowledgeDocument], **overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": kb.name,
        "description": kb.description,
        "embedding_model": "",
        "documents-TOTAL_FORMS": str(len(documents)),
        "documents-INITIAL_FORMS": str(len(documents)),
        "documents-MIN_NUM_FORMS": "0",
        "documents-MAX_NUM_FORMS": "1000",
        "_save": "Save",
    }
    for i, doc in enumerate(documents):
        data[f"documents-{i}-id"] = str(doc.pk)
        data[f"documents-{i}-knowledge_base"] = str(kb.pk)
    data.update(overrides)
    return data


def messages_of(response: Any) -> list[str]:
    return [str(message) for message in response.context["messages"]]


def test_list_and_change_pages_show_documents_with_status_progress_and_error(admin_client, kb, queued):
    ready = document(kb, "manual.pdf", pdf_bytes("Descale the machine monthly."))
    broken = document(kb, "broken.pdf", b"%PDF-1.4 not really a pdf")
    waiting = document(kb, "later.txt", b"not ingested yet", ingested=False)
    KnowledgeDocument.objects.filter(pk=waiting.pk).update(status="processing", progress=42)

    listing = admin_client.get(KBS_URL)
    change = admin_client.get(f"{KBS_URL}{kb.pk}/change/")
    add = admin_client.get(f"{KBS_URL}add/")

    assert [listing.status_code, change.status_code, add.status_code] == [200, 200, 200]
    assert "manuals" in listing.content.decode()
    page = change.content.decode()
    for name in ("manual.pdf", "broken.pdf", "later.txt"):
        assert name in page
    assert ready.status == "ready"
    assert broken.status == "failed"
    assert broken.error
    assert broken.error.split(".")[0] in page  # the failure's message, inline
    assert "#198754" in page  # ready in green
    assert "#dc3545" in page  # failed in red
    assert "#0d6efd" in page  # processing in blue
    assert ">42<" in page.replace(" ", "").replace("\n", "")  # its progress


def test_an_upload_in_the_change_form_queues_the_documents_ingestion(
    admin_client, kb, queued, django_capture_on_commit_callbacks
):
    upload = SimpleUploadedFile("faq.md", b"# FAQ\n\nOpening hours are nine to five.", content_type="text/markdown")

    with django_capture_on_commit_callbacks(execute=True):
        response = admin_client.post(f"{KBS_URL}{kb.pk}/change/", change_form(kb, [], upload=upload), follow=True)

    assert response.status_code == 200
    added = KnowledgeDocument.objects.get(knowledge_base=kb)
    assert (added.name, added.status, added.mime_type) == ("faq.md", "queued", "text/markdown")
    assert queued == [str(added.document_id)]
    assert "faq.md is queued for ingestion." in messages_of(response)

    ingest(document_id=queued[0])
    assert KnowledgeChunk.objects.filter(document=added).exists()


def test_an_upload_of_an_unsupported_type_is_refused_on_the_form(admin_client, kb, queued):
    upload = SimpleUploadedFile("tool.exe", b"MZ\x90\x00", content_type="application/x-msdownload")

    response = admin_client.post(f"{KBS_URL}{kb.pk}/change/", change_form(kb, [], upload=upload))

    assert response.status_code == 200
    assert "Unsupported type" in str(response.context["adminform"].form.errors["upload"])
    assert not KnowledgeDocument.objects.exists()
    assert queued == []


def test_removing_a_document_inline_deletes_its_chunks(admin_client, kb, queued, django_capture_on_commit_callbacks):
    gone = document(kb, "old.txt", b"Obsolete instructions about the old machine.")
    kept = document(kb, "new.txt", b"Current instructions about the new machine.")
    assert KnowledgeChunk.objects.filter(document=gone).exists()
    version = KnowledgeBase.objects.get(pk=kb.pk).index_version
    form = change_form(kb, [gone, kept], **{"documents-0-DELETE": "on"})

    with django_capture_on_commit_callbacks(execute=True):
        response = admin_client.post(f"{KBS_URL}{kb.pk}/change/", form)

    assert response.status_code == 302
    assert list(KnowledgeDocument.objects.values_list("name", flat=True)) == ["new.txt"]
    assert not KnowledgeChunk.objects.filter(document_id=gone.pk).exists()
    assert KnowledgeChunk.objects.filter(document=kept).exists()
    assert KnowledgeBase.objects.get(pk=kb.pk).index_version > version


def test_deleting_a_knowledge_base_in_admin_deletes_its_documents_and_chunks(admin_client, kb, queued):
    document(kb, "a.txt", b"Some words to index.")

    response = admin_client.post(f"{KBS_URL}{kb.pk}/delete/", {"post": "yes"})

    assert response.status_code == 302
    assert not KnowledgeBase.objects.exists()
    assert not KnowledgeDocument.objects.exists()
    assert not KnowledgeChunk.objects.exists()


@pytest.fixture
def staff_client(workspace) -> Callable[[], Client]:
    def make() -> Client:
        user = UserFactory.create(username="staff", is_staff=True)
        user.user_permissions.add(*Permission.objects.filter(content_type__app_label="resources"))
        workspace_member_add(workspace=workspace, user=user)
        client = Client()
        client.force_login(user)
        return client

    return make


def test_staff_see_and_open_only_their_workspaces_knowledge_bases(staff_client, kb, queued):
    theirs = KnowledgeBase.objects.create(workspace=WorkspaceFactory.create(), kb_id="secret-kb", name="Theirs")
    client = staff_client()

    listing = client.get(KBS_URL).content.decode()

    assert "manuals" in listing
    assert "secret-kb" not in listing
    assert client.get(f"{KBS_URL}{kb.pk}/change/").status_code == 200
    assert client.get(f"{KBS_URL}{theirs.pk}/change/").status_code == 302  # "doesn't exist", redirected
    assert client.post(f"{KBS_URL}{theirs.pk}/delete/", {"post": "yes"}).status_code == 302
    assert KnowledgeBase.objects.filter(pk=theirs.pk).exists()


def test_the_embedding_model_choices_are_the_staff_members_workspaces_embedding_models(staff_client, workspace):
    provider = ModelProviderFactory.create(workspace=workspace)
    ModelFactory.create(workspace=workspace, provider=provider, model_id="embedder", kind="embedding")
    ModelFactory.create(workspace=workspace, provider=provider, model_id="chatter", kind="llm")
    elsewhere = WorkspaceFactory.create()
    ModelFactory.create(
        workspace=elsewhere,
        provider=ModelProviderFactory.create(workspace=elsewhere),
        model_id="their-embedder",
        kind="embedding",
    )

    page = staff_client().get(f"{KBS_URL}add/").content.decode()

    assert "embedder" in page
    assert "chatter" not in page
    assert "their-embedder" not in page
