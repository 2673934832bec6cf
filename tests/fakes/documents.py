"""Real documents of each type the knowledge bases ingest, made in memory: text, Markdown, HTML, PDF
(fpdf2, one page per given text, optionally encrypted) and DOCX (python-docx, headings, paragraphs and a
table), plus a corrupt PDF."""

from __future__ import annotations

import io

import docx
from fpdf import FPDF
from pypdf import PdfReader, PdfWriter


def pdf_bytes(*pages: str) -> bytes:
    pdf = FPDF()
    pdf.set_font("Helvetica", size=12)
    for text in pages:
        pdf.add_page()
        pdf.multi_cell(0, 8, text)
    return bytes(pdf.output())


def pdf_encrypted(*pages: str, password: str = "s3cret") -> bytes:
    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(pdf_bytes(*pages))))
    writer.encrypt(user_password=password, owner_password=password)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def pdf_corrupt() -> bytes:
    """Starts like a PDF, then garbage: a truncated or damaged upload."""
    return b"%PDF-1.7\n1 0 obj\n<< /Type /Catalog /Pages 2 0 R >>\nendobj\n" + bytes(range(256)) * 8


def docx_bytes(*, title: str, sections: list[tuple[str, list[str]]], table: list[list[str]] | None = None) -> bytes:
    document = docx.Document()
    document.add_heading(title, level=1)
    for heading, paragraphs in sections:
        document.add_heading(heading, level=2)
        for paragraph in paragraphs:
            document.add_paragraph(paragraph)
    if table:
        grid = document.add_table(rows=len(table), cols=len(table[0]))
        for r, row in enumerate(table):
            for c, value in enumerate(row):
                grid.cell(r, c).text = value
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def html_bytes(*, title: str, sections: list[tuple[str, str]]) -> bytes:
    body = "".join(f"<h2>{heading}</h2><p>{text}</p>" for heading, text in sections)
    return (
        f"<!doctype html><html><head><title>{title}</title><style>p {{ color: red }}</style>"
        f"<script>var hidden = 'do not index me';</script></head>"
        f"<body><h1>{title}</h1>{body}<footer>Copyright</footer></body></html>"
    ).encode()
