"""JSON Schema export of the public protocol models.

``python -m langbot_sdk.schema`` writes one JSON document (all models under ``$defs``, sorted keys,
trailing newline) to ``langbot_sdk/schemas/protocol_v1.json``; ``--check`` exits 1 when the committed
file differs from what the models produce, so CI catches a model change without a schema update.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from langbot_sdk import protocol
from langbot_sdk.protocol.base import PROTOCOL_VERSION

SCHEMA_PATH = Path(__file__).resolve().parent / "schemas" / f"protocol_{PROTOCOL_VERSION}.json"


def public_models() -> list[type[BaseModel]]:
    """Every pydantic model re-exported by ``langbot_sdk.protocol``, in name order."""
    models = []
    for name in sorted(protocol.__all__):
        obj = getattr(protocol, name)
        if isinstance(obj, type) and issubclass(obj, BaseModel) and not name.startswith("_"):
            models.append(obj)
    return models


def build_schema() -> dict[str, Any]:
    _, top = models_json_schema(
        [(model, "validation") for model in public_models()], ref_template="#/$defs/{model}"
    )
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": f"LangBot AgentRunner Protocol {PROTOCOL_VERSION}",
        "$defs": top.get("$defs", {}),
    }


def render_schema() -> str:
    return json.dumps(build_schema(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m langbot_sdk.schema", description=__doc__)
    parser.add_argument("--check", action="store_true", help="exit 1 if the committed schema is stale")
    parser.add_argument("--output", type=Path, default=SCHEMA_PATH, help="where to write (or check)")
    args = parser.parse_args(argv)
    rendered = render_schema()
    path: Path = args.output
    if args.check:
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current != rendered:
            print(
                f"{path} is stale: the protocol models changed. Regenerate it with "
                "`python -m langbot_sdk.schema` and commit the result.",
                file=sys.stderr,
            )
            return 1
        print(f"{path} is up to date.")
        return 0
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(rendered, encoding="utf-8")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
