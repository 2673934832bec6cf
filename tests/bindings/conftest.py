"""Fixtures of the bindings tests: a runner whose config schema has one item of every form type."""

from __future__ import annotations

from typing import Any

import pytest

from tests.factories import RunnerDescriptorFactory

EVERY_TYPE_SCHEMA: list[dict[str, Any]] = [
    {"name": "greeting", "label": "Greeting", "type": "string", "required": True},
    {"name": "notes", "label": "Notes", "type": "text"},
    {"name": "max_rounds", "label": "Max rounds", "type": "integer", "default": 5},
    {"name": "temperature", "label": "Temperature", "type": "number"},
    {"name": "stream", "label": "Stream", "type": "boolean", "default": True},
    {
        "name": "mode",
        "label": "Mode",
        "type": "select",
        "default": "fast",
        "options": [{"name": "fast", "label": "Fast"}, {"name": "careful", "label": "Careful"}],
    },
    {"name": "extra", "label": "Extra", "type": "json"},
    {"name": "api_key", "label": "API key", "type": "secret"},
    {"name": "prompt", "label": "Prompt", "type": "prompt-editor"},
    {"name": "model", "label": "Model", "type": "llm-model-selector"},
    {"name": "fallback_models", "label": "Fallback models", "type": "model-selector", "multiple": True},
    {"name": "kbs", "label": "Knowledge bases", "type": "knowledge-base-multi-selector"},
    {"name": "kb", "label": "Knowledge base", "type": "knowledge-base-selector"},
]


@pytest.fixture
def runner(db):
    return RunnerDescriptorFactory.create(
        plugin_author="tester", plugin_name="every-type", config_schema=EVERY_TYPE_SCHEMA
    )


@pytest.fixture
def encryption_keys(settings):
    """Two fresh Fernet keys, the first one active."""
    from foundation.crypto import generate_key

    keys = [generate_key(), generate_key()]
    settings.LANGBOT_ENCRYPTION_KEYS = keys[:1]
    return keys
