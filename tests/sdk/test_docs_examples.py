"""Every ```python block of the runner author's guide (docs/*.md) runs and its assertions hold: the blocks
of a page run in order in one namespace, top-level `await` allowed, against `langbot_sdk.testing`."""

from __future__ import annotations

import ast
import asyncio
import inspect
import re
from pathlib import Path
from typing import Any

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)
PAGES = sorted(p.name for p in DOCS.glob("*.md"))


def python_blocks(page: str) -> list[str]:
    return BLOCK.findall((DOCS / page).read_text(encoding="utf-8"))


async def run_blocks(page: str) -> None:
    namespace: dict[str, Any] = {"__name__": f"docs.{page}"}
    for number, source in enumerate(python_blocks(page), start=1):
        code = compile(source, f"docs/{page} block {number}", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        result = eval(code, namespace)
        if inspect.iscoroutine(result):
            await result


def test_the_guide_has_examples_on_every_page_that_promises_them():
    with_examples = {page for page in PAGES if python_blocks(page)}

    assert with_examples >= {
        "quickstart.md", "context-and-results.md", "host-apis.md", "state-storage-artifacts.md",
        "platform-actions.md", "cancellation-and-deadlines.md", "testing.md",
    }  # fmt: skip


@pytest.mark.parametrize("page", PAGES)
def test_the_examples_of_a_page_run(page: str):
    asyncio.run(run_blocks(page))
