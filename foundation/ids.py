"""Public ids made from names: the slug of a name, or the slug with a short random suffix when it is taken."""

from __future__ import annotations

import secrets
from collections.abc import Callable

from django.utils.text import slugify


def free_slug(*, base: str, taken: Callable[[str], bool], fallback: str) -> str:
    """A slug of `base` (at most 48 characters) that `taken` says is free; `fallback` when `base` has none."""
    candidate = slugify(base)[:48].strip("-")
    if candidate and not taken(candidate):
        return candidate
    while True:
        candidate = f"{(slugify(base)[:40].strip('-') or fallback)}-{secrets.token_hex(3)}"
        if not taken(candidate):
            return candidate
