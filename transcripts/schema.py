"""OpenAPI for the pydantic models of the gateway, transcript and runs APIs (`transcripts.*`,
`runners.*`, `artifacts.*`), rendered as OpenAPI 3.0 like the bindings models (see `bindings.schema`).

Imported from `TranscriptsConfig.ready()` so drf-spectacular finds the extension.
"""

from __future__ import annotations

from typing import Any

from bindings.schema import BindingsPydanticModelExtension

HOST_MODEL_MODULES = ("transcripts.", "runners.", "artifacts.")


class HostPydanticModelExtension(BindingsPydanticModelExtension):
    @classmethod
    def _matches(cls, target: Any) -> bool:
        is_model = super(BindingsPydanticModelExtension, cls)._matches(target)
        return is_model and getattr(target, "__module__", "").startswith(HOST_MODEL_MODULES)
