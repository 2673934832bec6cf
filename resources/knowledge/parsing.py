"""Documents to text blocks: plain text, Markdown, HTML, PDF and DOCX, chosen by MIME type or extension.

A parser returns the document's blocks in reading order — headings, paragraphs, tables — each with the
page it is on (PDF) so that chunking can keep headings and pages as chunk metadata. A document that cannot
be read (corrupt, encrypted, empty, an unsupported type, over one of the `ParseLimits`) raises
`DocumentRejectedError` with a message for the operator; ingestion stores that message on the document.

Every parser works within `ParseLimits` (resources/knowledge/limits.py): the characters it extracts are
counted as it goes, a PDF's pages and its streams' decoded sizes are bounded, and a DOCX's zip is measured
before python-docx reads it. The limits bound the work; the memory a parser may take is bounded by the
process it runs in (resources/knowledge/isolation.py), since no limit here can foresee a library's overhead.
"""

from __future__ import annotations

import io
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any

from resources.knowledge.limits import LimitExceededError, ParseLimits, TextBudget, size_text, zip_archive_check

if TYPE_CHECKING:
    from pypdf import PdfReader

logger = logging.getLogger(__name__)

TEXT = "text/plain"
MARKDOWN = "text/markdown"
HTML = "text/html"
PDF = "application/pdf"
DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"

_BY_EXTENSION = {
    ".txt": TEXT,
    ".text": TEXT,
    ".log": TEXT,
    ".csv": TEXT,
    ".md": MARKDOWN,
    ".markdown": MARKDOWN,
    ".html": HTML,
    ".htm": HTML,
    ".xhtml": HTML,
    ".pdf": PDF,
    ".docx": DOCX,
}
_ALIASES = {
    "text/x-markdown": MARKDOWN,
    "application/xhtml+xml": HTML,
    "text/csv": TEXT,
    "application/x-pdf": PDF,
}
# Declared types that say nothing about the content; the file name decides then.
_VAGUE = {"", "application/octet-stream", "binary/octet-stream", "application/zip", "text/plain"}


class DocumentRejectedError(Exception):
    """The document cannot be ingested; the message says why, in words for the operator."""


@dataclass
class Block:
    text: str
    kind: str = "paragraph"  # paragraph | heading | table
    level: int = 0  # a heading's level, 1 = top
    page: int | None = None


@dataclass
class ParsedDocument:
    mime_type: str
    blocks: list[Block] = field(default_factory=list)
    page_count: int = 0


def document_type(*, name: str, mime_type: str) -> str | None:
    """The parser's type for a document: the declared MIME type when it is specific, else the extension;
    None when neither names a supported type."""
    declared = mime_type.split(";", 1)[0].strip().lower()
    declared = _ALIASES.get(declared, declared)
    by_name = _BY_EXTENSION.get(PurePosixPath(name.lower()).suffix)
    if declared in _PARSERS and declared not in _VAGUE:
        return declared
    return by_name or (declared if declared in _PARSERS else None)


def document_parse(*, data: bytes, name: str, mime_type: str, limits: ParseLimits | None = None) -> ParsedDocument:
    kind = document_type(name=name, mime_type=mime_type)
    if kind is None:
        raise DocumentRejectedError(f"Unsupported document type {mime_type or 'unknown'!r} ({name!r}).")
    if not data:
        raise DocumentRejectedError("The document is empty.")
    limits = limits or ParseLimits()
    try:
        parsed = _PARSERS[kind](data, limits, TextBudget(limits))
    except LimitExceededError as exc:
        raise DocumentRejectedError(str(exc)) from exc
    parsed.blocks = [block for block in parsed.blocks if block.text.strip()]
    if not parsed.blocks:
        hint = " (a scanned PDF needs OCR, which this host does not do)" if kind == PDF else ""
        raise DocumentRejectedError(f"The document has no extractable text{hint}.")
    return parsed


# --- text and Markdown -------------------------------------------------------------------------------


def _decoded(data: bytes) -> str:
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return data.decode("utf-16")
    # UTF-8 first; GB18030 covers Chinese files saved by older tools; Latin-1 never fails.
    for encoding in ("utf-8-sig", "gb18030"):
        try:
            return data.decode(encoding)
        except UnicodeDecodeError:
            continue
    return data.decode("latin-1")


def _decoded_within(data: bytes, budget: TextBudget) -> str:
    # A text file's characters are all extracted: count them before splitting them up.
    return budget.take(_decoded(data))


def _paragraphs(text: str, page: int | None = None) -> list[Block]:
    return [
        Block(text=part.strip(), page=page) for part in re.split(r"\n\s*\n", text.replace("\r\n", "\n")) if part.strip()
    ]


def _text(data: bytes, limits: ParseLimits, budget: TextBudget) -> ParsedDocument:
    return ParsedDocument(mime_type=TEXT, blocks=_paragraphs(_decoded_within(data, budget)))


_MD_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_MD_FENCE = re.compile(r"^\s*(```|~~~)")


def _markdown(data: bytes, limits: ParseLimits, budget: TextBudget) -> ParsedDocument:
    blocks: list[Block] = []
    buffer: list[str] = []
    fenced = False

    def flush() -> None:
        if buffer:
            blocks.extend(_paragraphs("\n".join(buffer)))
            buffer.clear()

    for line in _decoded_within(data, budget).splitlines():
        if _MD_FENCE.match(line):
            # A code block is one paragraph, blank lines and all.
            fenced = not fenced
            if fenced:
                flush()
            buffer.append(line)
            if not fenced:
                blocks.append(Block(text="\n".join(buffer)))
                buffer.clear()
            continue
        heading = None if fenced else _MD_HEADING.match(line)
        if heading:
            flush()
            blocks.append(Block(text=heading.group(2), kind="heading", level=len(heading.group(1))))
        else:
            buffer.append(line)
    flush()
    return ParsedDocument(mime_type=MARKDOWN, blocks=blocks)


# --- HTML --------------------------------------------------------------------------------------------

_HTML_SKIPPED = {"script", "style", "noscript", "template", "head", "svg", "iframe", "object", "button", "form"}
_HTML_BLOCKS = {
    "address", "article", "aside", "blockquote", "body", "dd", "div", "dl", "dt", "fieldset", "figcaption",
    "figure", "footer", "header", "hr", "li", "main", "nav", "ol", "p", "pre", "section", "table", "tr", "td",
    "th", "ul", "br", "caption", "details", "summary",
}  # fmt: skip
_HTML_HEADINGS = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}


def _html(data: bytes, limits: ParseLimits, budget: TextBudget) -> ParsedDocument:
    from bs4 import BeautifulSoup, NavigableString, Tag
    from bs4.element import Comment, Doctype, ProcessingInstruction

    soup = BeautifulSoup(data, "html.parser")
    blocks: list[Block] = []
    buffer: list[str] = []

    def flush() -> None:
        text = re.sub(r"[ \t\r\f\v]+", " ", "".join(buffer))
        text = "\n".join(line.strip() for line in text.split("\n") if line.strip())
        if text:
            blocks.append(Block(text=budget.take(text)))
        buffer.clear()

    def walk(node: Any) -> None:
        for child in node.children:
            if isinstance(child, Comment | Doctype | ProcessingInstruction):
                continue
            if isinstance(child, NavigableString):
                buffer.append(str(child))
            elif isinstance(child, Tag):
                name = child.name.lower()
                if name in _HTML_SKIPPED:
                    continue
                if name in _HTML_HEADINGS:
                    flush()
                    text = " ".join(child.get_text(" ").split())
                    if text:
                        blocks.append(Block(text=budget.take(text), kind="heading", level=_HTML_HEADINGS[name]))
                elif name in ("td", "th"):
                    walk(child)
                    buffer.append(" | ")
                elif name in ("br", "tr"):
                    # A line break inside the paragraph (a table row stays one block with its rows).
                    buffer.append("\n")
                    walk(child)
                    buffer.append("\n")
                elif name in _HTML_BLOCKS:
                    flush()
                    walk(child)
                    flush()
                else:
                    walk(child)

    walk(soup.body or soup)
    flush()
    title = soup.title.get_text(" ").strip() if soup.title else ""
    if title and not any(block.kind == "heading" for block in blocks[:1]):
        blocks.insert(0, Block(text=title, kind="heading", level=1))
    return ParsedDocument(mime_type=HTML, blocks=blocks)


# --- PDF ---------------------------------------------------------------------------------------------


def _pdf(data: bytes, limits: ParseLimits, budget: TextBudget) -> ParsedDocument:
    from pypdf import PdfReader, apply_configuration
    from pypdf.errors import LimitReachedError, PyPdfError

    # pypdf bounds what each stream may decode to; those bounds become the expanded-size limit.
    bound = limits.max_expanded_bytes
    bounded = apply_configuration(
        array_based_stream_maximum_output_length=bound,
        jbig2_maximum_output_length=bound,
        lzw_maximum_output_length=bound,
        run_length_maximum_output_length=bound,
        zlib_maximum_output_length=bound,
        brotli_maximum_output_length=bound,
        image_maximum_buffer_size=bound,
    )
    try:
        with bounded:
            return _pdf_read(PdfReader(io.BytesIO(data)), limits, budget)
    except DocumentRejectedError:
        raise
    except LimitReachedError as exc:
        raise DocumentRejectedError(
            f"A stream in the PDF expands to more than {size_text(bound)} (LANGBOT_KB_MAX_EXPANDED_BYTES)."
        ) from exc
    except (PyPdfError, ValueError, KeyError, TypeError, AttributeError, IndexError, OSError) as exc:
        raise DocumentRejectedError(f"The PDF cannot be read: {exc or type(exc).__name__}.") from exc


def _pdf_read(reader: PdfReader, limits: ParseLimits, budget: TextBudget) -> ParsedDocument:
    if reader.is_encrypted:
        # Many PDFs are "encrypted" with an empty user password only to set permissions.
        try:
            opened = bool(reader.decrypt(""))
        except Exception:  # pypdf raises several kinds for unsupported ciphers
            opened = False
        if not opened:
            raise DocumentRejectedError("The PDF is encrypted with a password; upload an unprotected copy.")
    pages = reader.pages
    if len(pages) > limits.max_pdf_pages:
        raise DocumentRejectedError(
            f"The PDF has {len(pages):,} pages, more than {limits.max_pdf_pages:,} (LANGBOT_KB_MAX_PDF_PAGES)."
        )
    blocks: list[Block] = []
    for number, page in enumerate(pages, start=1):
        text = budget.take(page.extract_text() or "")
        blocks.extend(_paragraphs(text, page=number) or [])
    return ParsedDocument(mime_type=PDF, blocks=blocks, page_count=len(pages))


# --- DOCX --------------------------------------------------------------------------------------------

_DOCX_HEADING = re.compile(r"^heading (\d)$", re.IGNORECASE)


def _docx(data: bytes, limits: ParseLimits, budget: TextBudget) -> ParsedDocument:
    import zipfile

    import docx
    from docx.opc.exceptions import PackageNotFoundError
    from docx.table import Table
    from docx.text.paragraph import Paragraph

    try:
        # python-docx inflates every part of the package at once: the zip is measured before it may.
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            zip_archive_check(archive, data=data, limits=limits, kind="DOCX")
        document = docx.Document(io.BytesIO(data))
    except (PackageNotFoundError, zipfile.BadZipFile, KeyError, ValueError) as exc:
        raise DocumentRejectedError(f"The DOCX cannot be read: {exc or type(exc).__name__}.") from exc
    blocks: list[Block] = []
    # Resolving a paragraph's style scans the document's styles each time (the default style's lookup
    # especially), which made a long document take minutes: each style id is resolved once.
    style_names: dict[str | None, str] = {}
    for item in document.iter_inner_content():
        if isinstance(item, Paragraph):
            text = budget.take(item.text.strip())
            style_id = item._p.style
            if style_id not in style_names:
                style_names[style_id] = (item.style.name if item.style is not None else "") or ""
            style = style_names[style_id]
            heading = _DOCX_HEADING.match(style)
            if heading:
                blocks.append(Block(text=text, kind="heading", level=int(heading.group(1))))
            elif style.lower() == "title":
                blocks.append(Block(text=text, kind="heading", level=1))
            else:
                blocks.append(Block(text=text))
        elif isinstance(item, Table):
            rows = []
            for row in item.rows:
                cells = [cell.text.strip() for cell in row.cells]
                # Merged cells repeat their text in each grid cell they span.
                rows.append(" | ".join(dict.fromkeys(cells)))
            blocks.append(Block(text=budget.take("\n".join(rows)), kind="table"))
    return ParsedDocument(mime_type=DOCX, blocks=blocks)


_PARSERS: dict[str, Callable[[bytes, ParseLimits, TextBudget], ParsedDocument]] = {
    TEXT: _text,
    MARKDOWN: _markdown,
    HTML: _html,
    PDF: _pdf,
    DOCX: _docx,
}
SUPPORTED_TYPES = sorted(_PARSERS)
