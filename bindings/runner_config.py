"""Runner config against the runner's form schema (`RunnerDescriptor.config_schema`).

The form schema (a list of DynamicFormItemSchema dicts) is turned into a JSON Schema and checked with
`jsonschema`; each failure becomes one message under `runner_config.<item name>`. Defaults of missing
items are filled in, unknown keys are refused, and the values of `secret` items are split off so the
caller can store them encrypted. A secret sent back as the mask (`SECRET_MASK`) keeps the stored value.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError as JsonSchemaError
from pydantic import ValidationError as PydanticValidationError

from foundation.crypto import SECRET_MASK
from langbot_sdk.protocol.manifest import DynamicFormItemSchema, DynamicFormItemType

CONFIG_FIELD_PREFIX = "runner_config"

# Without a schema (legacy import of a runner not installed yet) these top-level keys are treated as
# secrets, so credentials copied from an old config are still encrypted at rest and masked.
_CREDENTIAL_NAME = re.compile(r"(key|secret|token|password|passwd|credential)", re.IGNORECASE)


class RunnerConfigError(Exception):
    """Field-level problems: `{"runner_config.<name>": message}`."""

    def __init__(self, fields: dict[str, str]):
        super().__init__("; ".join(f"{k}: {v}" for k, v in fields.items()))
        self.fields = fields


@dataclass(frozen=True)
class SplitConfig:
    """A validated config: the plain values and, apart, the secret ones."""

    plain: dict[str, Any] = field(default_factory=dict)
    secrets: dict[str, Any] = field(default_factory=dict)


def config_field_name(item_name: str) -> str:
    return f"{CONFIG_FIELD_PREFIX}.{item_name}"


def config_schema_items(config_schema: list[dict[str, Any]]) -> list[DynamicFormItemSchema]:
    """Parse a stored form schema (aliases such as `password` or `int` are resolved)."""
    try:
        return [DynamicFormItemSchema.model_validate(item) for item in config_schema]
    except PydanticValidationError as exc:
        # The runtime validated these manifests already; a broken row is a host bug, not user input.
        raise ValueError(f"stored runner config schema is invalid: {exc}") from exc


def _string(required: bool) -> dict[str, Any]:
    return {"type": "string", "minLength": 1} if required else {"type": "string"}


def _string_list(required: bool) -> dict[str, Any]:
    return {"type": "array", "items": {"type": "string", "minLength": 1}, **({"minItems": 1} if required else {})}


def _item_schema(item: DynamicFormItemSchema) -> dict[str, Any]:
    kind = item.type
    required = item.required
    if kind in (DynamicFormItemType.STRING, DynamicFormItemType.TEXT, DynamicFormItemType.SECRET):
        return _string_list(required) if item.multiple else _string(required)
    if kind in (DynamicFormItemType.INTEGER, DynamicFormItemType.NUMBER):
        limits = (("minimum", item.minimum), ("maximum", item.maximum))
        bounds = {key: value for key, value in limits if value is not None}
        return {"type": "integer" if kind is DynamicFormItemType.INTEGER else "number", **bounds}
    if kind is DynamicFormItemType.BOOLEAN:
        return {"type": "boolean"}
    if kind is DynamicFormItemType.SELECT:
        choice = {"enum": [option.name for option in item.options]}
        if item.multiple:
            return {"type": "array", "items": choice, "uniqueItems": True, **({"minItems": 1} if required else {})}
        return choice
    if kind is DynamicFormItemType.JSON:
        return {"type": item.json_type} if item.json_type else {}
    if kind is DynamicFormItemType.PROMPT_EDITOR:
        message = {
            "type": "object",
            "properties": {"role": {"type": "string", "minLength": 1}, "content": {"type": "string"}},
            "required": ["role", "content"],
            "additionalProperties": False,
        }
        return {"anyOf": [{"type": "string"}, {"type": "array", "items": message}]}
    if kind in (DynamicFormItemType.MODEL_SELECTOR, DynamicFormItemType.KNOWLEDGE_BASE_SELECTOR):
        return _string_list(required) if item.multiple else _string(required)
    raise ValueError(f"unsupported config item type {kind!r}")  # pragma: no cover - enum is exhaustive


def config_json_schema(items: list[DynamicFormItemSchema]) -> dict[str, Any]:
    """The JSON Schema a config of these form items must satisfy."""
    properties: dict[str, Any] = {}
    for item in items:
        schema = _item_schema(item)
        # An optional item may be sent as null, which means "not set".
        properties[item.name] = schema if item.required else {"anyOf": [{"type": "null"}, schema]}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": properties,
        "required": [item.name for item in items if item.required],
        "additionalProperties": False,
    }


_TYPE_WORDS = {
    DynamicFormItemType.STRING: "a string",
    DynamicFormItemType.TEXT: "a string",
    DynamicFormItemType.SECRET: "a string",
    DynamicFormItemType.INTEGER: "an integer",
    DynamicFormItemType.NUMBER: "a number",
    DynamicFormItemType.BOOLEAN: "true or false",
    DynamicFormItemType.JSON: "a JSON value",
    DynamicFormItemType.PROMPT_EDITOR: "a string or a list of {role, content} messages",
    DynamicFormItemType.MODEL_SELECTOR: "a model id",
    DynamicFormItemType.KNOWLEDGE_BASE_SELECTOR: "a knowledge base id",
}


def _expected(item: DynamicFormItemSchema) -> str:
    if item.type is DynamicFormItemType.SELECT:
        choices = ", ".join(option.name for option in item.options)
        return f"a list of distinct values out of: {choices}" if item.multiple else f"one of: {choices}"
    word = _TYPE_WORDS[item.type]
    if item.type is DynamicFormItemType.JSON and item.json_type:
        return "a JSON list" if item.json_type == "array" else "a JSON object"
    if item.minimum is not None or item.maximum is not None:
        low, high = (_number_text(v) for v in (item.minimum, item.maximum))
        if item.minimum is not None and item.maximum is not None:
            return f"{word} from {low} to {high}"
        return f"{word} of at least {low}" if item.minimum is not None else f"{word} of at most {high}"
    if item.multiple:
        return f"a list of non-empty strings ({word.removeprefix('a ').removeprefix('an ')} each)"
    if item.required and item.type not in (
        DynamicFormItemType.INTEGER,
        DynamicFormItemType.NUMBER,
        DynamicFormItemType.BOOLEAN,
        DynamicFormItemType.JSON,
        DynamicFormItemType.PROMPT_EDITOR,
    ):
        return f"{word}, not empty"
    return word


def _number_text(value: float | None) -> str:
    return "" if value is None else (str(int(value)) if float(value).is_integer() else str(value))


def _messages(
    errors: list[JsonSchemaError], items: dict[str, DynamicFormItemSchema], config: dict[str, Any]
) -> dict[str, str]:
    fields: dict[str, str] = {}
    for error in errors:
        if error.validator == "required":
            for name in items:
                if items[name].required and name not in config:
                    fields.setdefault(config_field_name(name), "This field is required.")
        elif error.validator == "additionalProperties":
            for name in config:
                if name not in items:
                    fields.setdefault(config_field_name(name), "Unknown config field for this runner.")
        elif error.validator == "type" and not error.absolute_path:
            fields.setdefault(CONFIG_FIELD_PREFIX, "Must be a JSON object.")
        elif error.absolute_path:
            name = str(error.absolute_path[0])
            item = items.get(name)
            message = f"Must be {_expected(item)}." if item is not None else error.message
            fields.setdefault(config_field_name(name), message)
        else:  # pragma: no cover - every other keyword is below a property
            fields.setdefault(CONFIG_FIELD_PREFIX, error.message)
    return fields


def runner_config_validate(
    *,
    config_schema: list[dict[str, Any]],
    config: Any,
    stored_secrets: dict[str, Any] | None = None,
) -> SplitConfig:
    """Check `config` against the form schema and return it with defaults filled in, secrets split off.

    Raises `RunnerConfigError` with one message per offending field.
    """
    if not isinstance(config, dict):
        raise RunnerConfigError({CONFIG_FIELD_PREFIX: "Must be a JSON object."})
    items = {item.name: item for item in config_schema_items(config_schema)}
    stored_secrets = stored_secrets or {}
    values = dict(config)
    mask_errors: dict[str, str] = {}
    for name, item in items.items():
        if item.type is DynamicFormItemType.SECRET and values.get(name) == SECRET_MASK:
            if name in stored_secrets:
                values[name] = stored_secrets[name]
            else:
                mask_errors[config_field_name(name)] = "There is no stored secret to keep; send the value."
        if values.get(name) is None and item.default is not None:
            values[name] = item.default
        elif name in values and values[name] is None:
            del values[name]
    errors = list(Draft202012Validator(config_json_schema(list(items.values()))).iter_errors(values))
    fields = {**_messages(errors, items, values), **mask_errors}
    if fields:
        raise RunnerConfigError(dict(sorted(fields.items())))
    secret_names = {name for name, item in items.items() if item.type is DynamicFormItemType.SECRET}
    return SplitConfig(
        plain={k: v for k, v in values.items() if k not in secret_names},
        secrets={k: v for k, v in values.items() if k in secret_names},
    )


def runner_config_split_unvalidated(*, config: dict[str, Any]) -> SplitConfig:
    """Store a config whose schema is unknown as is, taking credential-looking top-level keys as secrets."""
    secret_names = {k for k, v in config.items() if _CREDENTIAL_NAME.search(k) and isinstance(v, str)}
    return SplitConfig(
        plain={k: v for k, v in config.items() if k not in secret_names},
        secrets={k: v for k, v in config.items() if k in secret_names},
    )


def runner_config_masked(*, plain: dict[str, Any], secrets: dict[str, Any]) -> dict[str, Any]:
    """What an API or admin page may show: every secret replaced by the mask."""
    return {**plain, **dict.fromkeys(secrets, SECRET_MASK)}


def runner_config_unmask(*, config: dict[str, Any], stored_secrets: dict[str, Any]) -> dict[str, Any]:
    """Put stored secrets back where a schemaless config carries the mask (the key is kept)."""
    return {k: (stored_secrets[k] if v == SECRET_MASK and k in stored_secrets else v) for k, v in config.items()}
