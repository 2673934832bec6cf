"""Parsing a document in a child process, so that a pathological document cannot take the worker with it.

The worker that ingests documents is the worker that runs agents. `document_parse_isolated` starts a fresh
Python (`python -m resources.knowledge.isolation`), hands it the document on stdin and the limits on its
command line, and reads the blocks back as JSON. The child caps its own address space (RLIMIT_AS) and CPU
time before it reads a byte, so a parser that allocates without bound meets MemoryError in the child, and
the worker's memory holds only the upload and the extracted text, never what the document expands to.

A subprocess rather than a second Celery queue: it needs no other worker started by `make run` or CI, and
rather than `multiprocessing`: Celery's prefork pool runs tasks in daemonic processes, which may not start
multiprocessing children. The child imports no Django and gets no environment beyond PATH and a locale, so
a parser exploited by a hostile document finds no host secret in it.

How the child can end, and what the document's `error` says then:
- it answers with blocks — the document goes on to chunking;
- it answers with a rejection (unreadable, over a `ParseLimits` bound) — that message;
- it runs out of its address space — "the parser ran out of its memory limit (LANGBOT_KB_PARSE_MEMORY_MB)";
- it outlives the timeout — it is killed, and the message names LANGBOT_KB_PARSE_TIMEOUT_SECONDS;
- it dies any other way (a signal, a bug) — `ParserCrashedError`, which ingestion logs and reports as an
  internal error.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from resources.knowledge.limits import ParseLimits
from resources.knowledge.parsing import Block, DocumentRejectedError, ParsedDocument, document_parse

# The child's exit status when it ran out of memory; any other non-zero status is a crash.
OUT_OF_MEMORY_EXIT = 86
_PROJECT_ROOT = Path(__file__).resolve().parents[2]
# Enough of a crashed child's stderr to see what happened, not the whole of a runaway traceback.
_STDERR_TAIL = 4000


class ParserCrashedError(Exception):
    """The parse child died without an answer, for a reason other than its memory limit or timeout."""


def document_parse_isolated(
    *, data: bytes, name: str, mime_type: str, limits: ParseLimits, memory_mb: int, timeout_seconds: float
) -> ParsedDocument:
    """The document's blocks, parsed in a child process held to `memory_mb` of address space and
    `timeout_seconds` of wall-clock time. Raises `DocumentRejectedError` for every way the document is at
    fault, `ParserCrashedError` when the child fails for another reason."""
    request = {"name": name, "mime_type": mime_type, "limits": limits.as_json(), "memory_mb": memory_mb,
               "cpu_seconds": int(timeout_seconds) + 1}  # fmt: skip
    try:
        finished = subprocess.run(
            [sys.executable, "-E", "-s", "-m", "resources.knowledge.isolation", json.dumps(request)],
            input=data,
            capture_output=True,
            timeout=timeout_seconds,
            cwd=_PROJECT_ROOT,
            env={"PATH": os.environ.get("PATH", os.defpath), "LANG": "C.UTF-8"},
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        # subprocess.run has killed and reaped the child by now.
        raise DocumentRejectedError(
            f"The parser took longer than {timeout_seconds:g} s (LANGBOT_KB_PARSE_TIMEOUT_SECONDS)."
        ) from exc
    if finished.returncode == OUT_OF_MEMORY_EXIT or (
        finished.returncode != 0 and b"MemoryError" in finished.stderr[-_STDERR_TAIL:]
    ):
        raise DocumentRejectedError(
            f"The parser ran out of its memory limit of {memory_mb} MB (LANGBOT_KB_PARSE_MEMORY_MB)."
        )
    if finished.returncode == -signal.SIGXCPU:
        raise DocumentRejectedError(
            f"The parser used more than {timeout_seconds:g} s of CPU time (LANGBOT_KB_PARSE_TIMEOUT_SECONDS)."
        )
    if finished.returncode != 0:
        tail = finished.stderr[-_STDERR_TAIL:].decode("utf-8", "replace")
        raise ParserCrashedError(f"the parse child ended with status {finished.returncode}: {tail}")
    answer = json.loads(finished.stdout)
    if "rejected" in answer:
        raise DocumentRejectedError(answer["rejected"])
    parsed = answer["parsed"]
    return ParsedDocument(
        mime_type=parsed["mime_type"],
        page_count=parsed["page_count"],
        blocks=[Block(**block) for block in parsed["blocks"]],
    )


# --- the child ---------------------------------------------------------------------------------------


def _limit_self(*, memory_mb: int, cpu_seconds: int) -> None:
    import resource

    for kind, wanted in (
        (resource.RLIMIT_AS, memory_mb * 1024**2),
        # A backstop for a child whose worker died before it could time it out.
        (resource.RLIMIT_CPU, cpu_seconds),
        (resource.RLIMIT_CORE, 0),
    ):
        _, hard = resource.getrlimit(kind)
        cap = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        resource.setrlimit(kind, (cap, cap))


def _answer(request: dict[str, Any], data: bytes) -> dict[str, Any]:
    try:
        parsed = document_parse(
            data=data, name=request["name"], mime_type=request["mime_type"], limits=ParseLimits(**request["limits"])
        )
    except DocumentRejectedError as exc:
        return {"rejected": str(exc)}
    return {
        "parsed": {
            "mime_type": parsed.mime_type,
            "page_count": parsed.page_count,
            "blocks": [asdict(block) for block in parsed.blocks],
        }
    }


def main() -> None:
    request = json.loads(sys.argv[1])
    _limit_self(memory_mb=request["memory_mb"], cpu_seconds=request["cpu_seconds"])
    try:
        answer = json.dumps(_answer(request, sys.stdin.buffer.read()), ensure_ascii=False).encode()
    except MemoryError:
        # Exit at once: unwinding, logging or even printing may need the memory that ran out.
        os._exit(OUT_OF_MEMORY_EXIT)
    sys.stdout.buffer.write(answer)
    sys.stdout.buffer.flush()


if __name__ == "__main__":
    main()
