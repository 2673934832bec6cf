"""Runner ids: ``plugin:<author>/<plugin name>/<runner name>``, parsed and validated in one place."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Self

from langbot_sdk.protocol.limits import RUNNER_ID_PART_MAX_LENGTH

RUNNER_ID_PREFIX = "plugin:"
_PART_CHARS = re.compile(r"[A-Za-z0-9_.-]+")


def validate_id_part(value: str, what: str) -> str:
    """Check one id part (author, plugin or runner name) and return it unchanged.

    Parts are ``[A-Za-z0-9_.-]{1,64}`` and may not be only dots: ids end up in state keys, storage
    prefixes and log lines, where ``.``/``..`` would read like paths.
    """
    if not value:
        raise ValueError(f"{what} is empty")
    if any(ch.isspace() for ch in value):
        raise ValueError(f"{what} {value!r} contains whitespace")
    if len(value) > RUNNER_ID_PART_MAX_LENGTH:
        raise ValueError(f"{what} is {len(value)} characters long; the limit is {RUNNER_ID_PART_MAX_LENGTH}")
    if not _PART_CHARS.fullmatch(value):
        bad = sorted({ch for ch in value if not _PART_CHARS.fullmatch(ch)})
        raise ValueError(
            f"{what} {value!r} contains {bad!r}; only letters, digits, '_', '.' and '-' are allowed"
        )
    if set(value) == {"."}:
        raise ValueError(f"{what} {value!r} may not consist of dots only")
    return value


@dataclass(frozen=True, slots=True)
class RunnerId:
    """A runner's stable identity; ``str()`` gives the wire form."""

    author: str
    plugin: str
    runner: str

    def __post_init__(self) -> None:
        validate_id_part(self.author, "author")
        validate_id_part(self.plugin, "plugin name")
        validate_id_part(self.runner, "runner name")

    def __str__(self) -> str:
        return f"{RUNNER_ID_PREFIX}{self.author}/{self.plugin}/{self.runner}"

    @property
    def plugin_identity(self) -> str:
        """``author/plugin``, the identity the runtime stamps on proxy calls."""
        return f"{self.author}/{self.plugin}"

    @classmethod
    def parse(cls, value: str) -> Self:
        """Parse ``plugin:<author>/<plugin>/<runner>``; raises ``ValueError`` saying what is wrong."""
        if not isinstance(value, str):
            raise ValueError(f"runner id must be a string, got {type(value).__name__}")
        if not value.startswith(RUNNER_ID_PREFIX):
            raise ValueError(f"runner id {value!r} must start with {RUNNER_ID_PREFIX!r}")
        parts = value[len(RUNNER_ID_PREFIX) :].split("/")
        if len(parts) != 3:
            raise ValueError(
                f"runner id {value!r} must have exactly three '/'-separated parts "
                f"(author/plugin/runner), found {len(parts)}"
            )
        try:
            return cls(*parts)
        except ValueError as exc:
            raise ValueError(f"runner id {value!r}: {exc}") from None
