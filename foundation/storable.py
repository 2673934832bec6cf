"""Text the database can store, for every door through which outside text comes in.

PostgreSQL stores no NUL character in text or jsonb, and a lone UTF-16 surrogate (which JSON's `\\ud800`
escape decodes to) has no UTF-8 form. Either one reaching a query fails the whole statement. Requests
are refused with the path of the offending value (`unstorable_text_path`); output the host must keep —
a runner's results, audit rows — gets U+FFFD in its place (`storable_copy`, `storable_text`).
"""

from __future__ import annotations

import re
from typing import Any

from django.utils.translation import gettext_noop

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
# Marked for the catalogue only: the API and the runtime wire answer it in English; the chat socket shows it
# translated (`gettext(UNSTORABLE_MESSAGE)`) in the page's language.
UNSTORABLE_MESSAGE = gettext_noop("Must not contain NUL characters or unpaired surrogates.")
REPLACEMENT = "\ufffd"


def is_storable(text: str) -> bool:
    return _UNSTORABLE.search(text) is None


def unstorable_text_path(value: Any, path: str = "") -> str | None:
    """The dotted path of the first string in `value` that cannot be stored (for an object key: the
    object's path, "" at the top), else None."""
    if isinstance(value, str):
        return path if _UNSTORABLE.search(value) else None
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str) and _UNSTORABLE.search(key):
                return path
            found = unstorable_text_path(item, f"{path}.{key}" if path else str(key))
            if found is not None:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found = unstorable_text_path(item, f"{path}.{index}" if path else str(index))
            if found is not None:
                return found
    return None


def storable_text(text: str) -> str:
    return _UNSTORABLE.sub(REPLACEMENT, text)


def storable_copy(value: Any) -> Any:
    """`value` with U+FFFD for every character the database cannot store, in strings and object keys."""
    if isinstance(value, str):
        return storable_text(value)
    if isinstance(value, dict):
        return {storable_copy(k): storable_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [storable_copy(item) for item in value]
    return value
