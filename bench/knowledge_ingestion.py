"""Knowledge ingestion throughput on the user's path (issue 16: pages/s).

Real processes, as `make run` starts them (bench/_stream.py): daphne and a Celery worker. The bench makes
multi-page PDFs with fpdf2 (by default 20 documents of 50 pages, ~250 words a page), uploads them all over
REST (`POST /api/v1/knowledge-bases/{kb_id}/documents`, multipart, API key) and polls
`GET .../documents/{document_id}` until each is `ready`; the time runs from the first upload to the last
document ready. Twice: into a knowledge base without an embedding model (parse, chunk, full-text index)
and into one whose embedding model is a local fake OpenAI-compatible provider (tests/fakes/openai_server.py:
64-dimension vectors made by hashing words, so the figure is the host's cost, not a model's).

Needs DATABASE_URL=postgres://... and Redis; exits 2 when it cannot measure (a document that fails or never
gets ready included). A missed target is reported, not failed.
Usage: `python -m bench.knowledge_ingestion [--documents N] [--pages N]`.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from dataclasses import dataclass

import httpx

from bench._report import print_table
from bench._stream import Stack, stack

POLL_SECONDS = 0.1
READY_TIMEOUT = 900.0
WORDS_PER_PAGE = 250
STEMS = ("valve", "pump", "filter", "boiler", "sensor", "gasket", "relay", "manual", "descale", "pressure")
VOCABULARY = [stem + suffix for stem in STEMS for suffix in ("", "s", "ing", "ed")] + ["the", "of", "to", "and"]


@dataclass
class Outcome:
    documents: int
    pages: int
    chunks: int
    seconds: float
    failures: list[str]


def _pdfs(documents: int, pages: int) -> list[bytes]:
    from tests.fakes.documents import pdf_bytes

    rng = random.Random(16)

    def page(number: int) -> str:
        words = " ".join(rng.choice(VOCABULARY) for _ in range(WORDS_PER_PAGE))
        return f"Section {number}. {words.capitalize()}."

    return [pdf_bytes(*(page(n) for n in range(pages))) for _ in range(documents)]


def _ingest(http: httpx.Client, kb_id: str, pdfs: list[bytes]) -> Outcome:
    started = time.perf_counter()
    pending: list[str] = []
    failures: list[str] = []
    for number, data in enumerate(pdfs):
        files = {"file": (f"manual-{number}.pdf", data, "application/pdf")}
        answer = http.post(f"/api/v1/knowledge-bases/{kb_id}/documents", files=files)
        if answer.status_code != 202:
            failures.append(f"upload {number}: {answer.status_code} {answer.text[:200]}")
            continue
        pending.append(answer.json()["document_id"])
    pages = chunks = documents = 0
    deadline = time.monotonic() + READY_TIMEOUT
    while pending and time.monotonic() < deadline:
        for document_id in list(pending):
            body = http.get(f"/api/v1/knowledge-bases/{kb_id}/documents/{document_id}").json()
            if body["status"] in ("ready", "failed"):
                pending.remove(document_id)
            if body["status"] == "ready":
                documents += 1
                pages += body["page_count"]
                chunks += body["chunk_count"]
            elif body["status"] == "failed":
                failures.append(f"{document_id}: {body['error']}")
        time.sleep(POLL_SECONDS)
    failures.extend(f"{document_id}: not ready within {READY_TIMEOUT:.0f} s" for document_id in pending)
    return Outcome(documents, pages, chunks, time.perf_counter() - started, failures)


def _knowledge_base(http: httpx.Client, kb_id: str, embedding_model_id: str | None) -> None:
    body = {"kb_id": kb_id, "name": kb_id, "embedding_model_id": embedding_model_id}
    http.post("/api/v1/knowledge-bases", json=body).raise_for_status()


def measure(running: Stack, pdfs: list[bytes]) -> tuple[list[tuple[str, str, str]], list[str]]:
    from tests.fakes.openai_server import fake_openai

    headers = {"Authorization": f"Bearer {running.api_key}"}
    rows: list[tuple[str, str, str]] = []
    failures: list[str] = []
    with fake_openai() as provider, httpx.Client(base_url=running.base, headers=headers, timeout=120) as http:
        provider_body = {"provider_id": "local", "name": "Local fake", "base_url": provider.base_url, "api_key": "x"}
        http.post("/api/v1/model-providers", json=provider_body).raise_for_status()
        model_body = {"model_id": "embed", "provider_id": "local", "name": "fake-embed", "kind": "embedding"}
        http.post("/api/v1/models", json=model_body).raise_for_status()
        for kb_id, model_id, label in (("plain", None, "full text only"), ("embedded", "embed", "with embeddings")):
            _knowledge_base(http, kb_id, model_id)
            outcome = _ingest(http, kb_id, pdfs)
            failures.extend(f"{label}: {failure}" for failure in outcome.failures)
            seconds = outcome.seconds
            rows += [
                (f"{label}: documents ready", f"{outcome.documents}/{len(pdfs)} in {seconds:.1f} s", "all"),
                (f"{label}: pages/s", f"{outcome.pages / seconds:.1f}", ""),
                (f"{label}: chunks/s", f"{outcome.chunks / seconds:.1f}", ""),
                (f"{label}: chunks", f"{outcome.chunks:,} of {outcome.pages:,} pages", ""),
            ]
    return rows, failures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--documents", type=int, default=20)
    parser.add_argument("--pages", type=int, default=50)
    args = parser.parse_args()
    t0 = time.perf_counter()
    pdfs = _pdfs(args.documents, args.pages)
    made = time.perf_counter() - t0
    with stack() as running:
        rows, failures = measure(running, pdfs)
    size = sum(len(pdf) for pdf in pdfs) / 1024**2
    print_table([(f"PDFs made (fpdf2, {args.pages} pages each)", f"{args.documents} in {made:.1f} s, {size:.1f} MB",
                  ""), *rows])  # fmt: skip
    if failures:
        print(f"cannot measure: {len(failures)} document(s) not ingested: {failures[:5]}")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
