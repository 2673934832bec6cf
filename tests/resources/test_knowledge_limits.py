"""Documents that expand past what the host will parse: a DOCX decompression bomb, a zip with too many
entries, an entry whose declared size lies, a PDF with too many pages, text over the character cap. Each
fails with an error naming the limit and its setting; a parser that outgrows its memory limit fails the
document alone, and the worker does not hold what the document expands to."""

from __future__ import annotations

import io
import resource
import struct
import zipfile
from collections.abc import Callable
from typing import Any

import pytest

from resources.knowledge.ingestion import knowledge_document_ingest as ingest
from resources.models import KnowledgeChunk
from resources.tasks import knowledge_document_ingest
from tests.fakes.documents import docx_bytes, html_bytes, pdf_bytes

pytestmark = pytest.mark.django_db

MiB = 1024**2


@pytest.fixture
def kb(api_client, monkeypatch) -> str:
    monkeypatch.setattr(knowledge_document_ingest, "delay", lambda document_id: None)
    api_client.post("/api/v1/knowledge-bases", {"kb_id": "docs", "name": "Docs"}, format="json")
    return "docs"


def ingested(api_client: Any, name: str, data: bytes) -> dict[str, Any]:
    file = io.BytesIO(data)
    file.name = name
    created = api_client.post("/api/v1/knowledge-bases/docs/documents", {"file": file}, format="multipart")
    assert created.status_code == 202, created.content
    ingest(document_id=created.json()["document_id"])
    return api_client.get(f"/api/v1/knowledge-bases/docs/documents/{created.json()['document_id']}").json()


def assert_failed_on(document: dict[str, Any], *words: str) -> None:
    assert document["status"] == "failed", document
    for word in words:
        assert word in document["error"]
    assert not KnowledgeChunk.objects.filter(document__document_id=document["document_id"]).exists()


def docx_with(write_body: Callable[[Any], None] | None = None, *, extra_entries: int = 0) -> bytes:
    """A real DOCX whose word/document.xml body is written by `write_body` (streamed, so the test itself
    never holds what it expands to), with `extra_entries` more small files in the package."""
    source = zipfile.ZipFile(io.BytesIO(docx_bytes(title="Policy", sections=[("Scope", ["Applies to all."])])))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as package:
        for entry in source.infolist():
            content = source.read(entry)
            if entry.filename != "word/document.xml" or write_body is None:
                package.writestr(entry, content)
                continue
            head, tail = content.split(b"<w:body>")
            streamed = zipfile.ZipInfo("word/document.xml")
            streamed.compress_type = zipfile.ZIP_DEFLATED
            with package.open(streamed, "w") as body:
                body.write(head + b"<w:body>")
                write_body(body)
                body.write(tail)
        for n in range(extra_entries):
            package.writestr(f"extra/file{n}.xml", b"<x/>")
    return out.getvalue()


def comments(count: int, size: int = MiB) -> Callable[[Any], None]:
    def write(body: Any) -> None:
        for _ in range(count):
            body.write(b"<!--" + b"x" * size + b"-->")

    return write


def with_declared_size(data: bytes, name: str, size: int) -> bytes:
    """The zip with `name`'s uncompressed size rewritten to `size` in both its headers, as a hostile tool would."""
    patched = bytearray(data)
    encoded = name.encode()
    for signature, size_at in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):
        name_at = 30 if signature == b"PK\x03\x04" else 46
        start = 0
        while (start := patched.find(signature, start)) != -1:
            if patched[start + name_at : start + name_at + len(encoded)] == encoded:
                struct.pack_into("<I", patched, start + size_at, size)
            start += 4
    return bytes(patched)


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def test_the_reported_docx_bomb_fails_on_the_default_limits_naming_the_limit(api_client, kb):
    # The report's document: 200 comments of 1 MiB each in word/document.xml, a few hundred KB zipped.
    bomb = docx_with(comments(200))
    assert len(bomb) < 1 * MiB

    document = ingested(api_client, "bomb.docx", bomb)

    assert_failed_on(document, "word/document.xml expands to more than 64 MiB (LANGBOT_KB_MAX_EXPANDED_BYTES)")


def test_a_docx_whose_files_expand_past_the_limit_in_all_fails(api_client, kb, settings):
    settings.LANGBOT_KB_MAX_EXPANDED_BYTES = 4 * MiB
    settings.LANGBOT_KB_MAX_COMPRESSION_RATIO = 100_000
    parts = docx_with(extra_entries=0)
    source = zipfile.ZipFile(io.BytesIO(parts))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as package:
        for entry in source.infolist():
            package.writestr(entry, source.read(entry))
        for n in range(3):
            package.writestr(f"word/media/blob{n}.bin", b"\0" * (2 * MiB))

    document = ingested(api_client, "spread.docx", out.getvalue())

    assert_failed_on(document, "more than 4 MiB in all", "LANGBOT_KB_MAX_EXPANDED_BYTES")


def test_a_docx_with_too_many_files_fails_before_any_is_read(api_client, kb, settings):
    settings.LANGBOT_KB_MAX_ZIP_ENTRIES = 40

    document = ingested(api_client, "crowded.docx", docx_with(extra_entries=60))

    assert_failed_on(document, "more than 40 (LANGBOT_KB_MAX_ZIP_ENTRIES)")


def test_an_entry_that_lies_about_its_size_is_measured_by_what_it_inflates_to(api_client, kb):
    # 8 MiB of comments, declared as 2 KB: the central directory alone would pass every limit.
    honest = docx_with(comments(8))
    lying = with_declared_size(honest, "word/document.xml", 2048)
    assert zipfile.ZipFile(io.BytesIO(lying)).getinfo("word/document.xml").file_size == 2048

    document = ingested(api_client, "liar.docx", lying)

    assert_failed_on(document, "word/document.xml expands more than 100 times", "LANGBOT_KB_MAX_COMPRESSION_RATIO")


def test_an_entry_that_lies_about_its_size_is_held_to_the_expanded_limit_too(api_client, kb, settings):
    settings.LANGBOT_KB_MAX_EXPANDED_BYTES = 2 * MiB
    settings.LANGBOT_KB_MAX_COMPRESSION_RATIO = 100_000
    lying = with_declared_size(docx_with(comments(8)), "word/document.xml", 2048)

    document = ingested(api_client, "liar.docx", lying)

    assert_failed_on(document, "expand to more than 2 MiB", "word/document.xml", "(LANGBOT_KB_MAX_EXPANDED_BYTES)")


def test_a_docx_within_the_limits_is_still_ingested(api_client, kb, settings):
    settings.LANGBOT_KB_MAX_ZIP_ENTRIES = 40

    document = ingested(api_client, "fine.docx", docx_with(extra_entries=5))

    assert (document["status"], document["error"]) == ("ready", "")


def test_a_pdf_with_more_pages_than_allowed_fails(api_client, kb, settings):
    settings.LANGBOT_KB_MAX_PDF_PAGES = 2

    document = ingested(api_client, "long.pdf", pdf_bytes("one", "two", "three"))

    assert_failed_on(document, "The PDF has 3 pages, more than 2 (LANGBOT_KB_MAX_PDF_PAGES)")


def test_a_pdf_stream_that_expands_past_the_limit_fails(api_client, kb, settings):
    settings.LANGBOT_KB_MAX_EXPANDED_BYTES = 2000
    page = "Words of a long page. " * 300  # its content stream inflates to several KB

    document = ingested(api_client, "dense.pdf", pdf_bytes(page))

    assert_failed_on(document, "A stream in the PDF expands to more than 2,000 bytes (LANGBOT_KB_MAX_EXPANDED_BYTES)")


@pytest.mark.parametrize(
    ("name", "make"),
    [
        ("long.txt", lambda text: text.encode()),
        ("long.md", lambda text: f"# Title\n\n{text}".encode()),
        ("long.html", lambda text: html_bytes(title="Long", sections=[("Part", text)])),
        ("long.docx", lambda text: docx_bytes(title="Long", sections=[("Part", [text])])),
        ("long.pdf", lambda text: pdf_bytes(text)),
    ],
)
def test_every_format_fails_once_its_text_passes_the_character_cap(api_client, kb, settings, name, make):
    settings.LANGBOT_KB_MAX_CHARACTERS = 1000
    text = "Words of a long document. " * 60

    document = ingested(api_client, name, make(text))

    assert_failed_on(document, "more than 1,000 characters of text (LANGBOT_KB_MAX_CHARACTERS)")


def test_a_parser_that_outgrows_its_memory_limit_fails_the_document_alone(api_client, kb, settings):
    # 100,000 paragraphs are under 1 MB of HTML and well over 100 MB as a parse tree.
    settings.LANGBOT_KB_PARSE_MEMORY_MB = 48
    tree = b"<html><body>" + b"<p>a</p>" * 100_000 + b"</body></html>"

    document = ingested(api_client, "tree.html", tree)
    settings.LANGBOT_KB_PARSE_MEMORY_MB = 1024
    after = ingested(api_client, "small.txt", b"the worker carries on")

    assert_failed_on(document, "ran out of its memory limit of 48 MB (LANGBOT_KB_PARSE_MEMORY_MB)")
    assert after["status"] == "ready"


def test_the_worker_does_not_hold_what_a_bomb_expands_to(api_client, kb, settings):
    # Limits high enough to let the bomb through to python-docx, whose 128 MiB part (and its XML tree)
    # exceeds the child's memory limit; in-process, the worker's peak memory would grow by all of that.
    settings.LANGBOT_KB_MAX_EXPANDED_BYTES = 1024 * MiB
    settings.LANGBOT_KB_MAX_COMPRESSION_RATIO = 100_000
    settings.LANGBOT_KB_PARSE_MEMORY_MB = 96
    bomb = docx_with(comments(128))
    before = peak_rss_mib()

    document = ingested(api_client, "bomb.docx", bomb)

    assert_failed_on(document, "LANGBOT_KB_PARSE_MEMORY_MB")
    assert peak_rss_mib() - before < 48


def test_a_parser_that_runs_past_the_timeout_is_stopped(api_client, kb, settings):
    settings.LANGBOT_KB_PARSE_TIMEOUT_SECONDS = 0.2
    tree = b"<html><body>" + b"<p>a</p>" * 200_000 + b"</body></html>"

    document = ingested(api_client, "slow.html", tree)

    assert_failed_on(document, "took longer than 0.2 s (LANGBOT_KB_PARSE_TIMEOUT_SECONDS)")
