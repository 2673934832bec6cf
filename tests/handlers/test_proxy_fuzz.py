"""Property-based test of the run-scoped host API (hypothesis): whatever a runner sends in a proxy call —
any subset of the action's fields with any JSON values — the host answers with a result or a typed
`AgentAPIError`. `runtime_error` is the dispatcher's answer to an exception it did not expect, i.e. a host
defect, so it must never come back."""

from __future__ import annotations

import enum
import types
import typing
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

from langbot_sdk.protocol import PROXY_REQUEST_MODELS, AgentAPIException, ErrorCode
from tests.fuzzing import fuzz_settings

# Text that has broken hosts before: NUL and a lone surrogate (unstorable in PostgreSQL), long, astral.
tricky_text = st.sampled_from(["\x00", "a\x00b", "\ud800", "x" * 5000, "\U0001f4a5"])
texts = st.text(max_size=40) | tricky_text
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
# Values a well-behaved runner would send, so that calls get past validation to the handlers.
plausible_text = st.sampled_from(
    ["conversation", "runner", "binding", "plugin", "workspace", "conv-a", "k", "qa-artifact", "message.send"]
) | texts


def _typed(annotation: Any) -> st.SearchStrategy[Any]:
    """Values of the field's type (constraints aside), or anything at all."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _typed(args[0])
    if origin in (typing.Union, types.UnionType):
        return st.one_of([_typed(arg) for arg in args])
    if origin is typing.Literal:
        return st.sampled_from(args)
    if origin is list:
        return st.lists(_typed(args[0]) if args else json_values, max_size=3)
    if origin is dict:
        return st.dictionaries(st.text(max_size=8), json_values, max_size=3)
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return st.sampled_from([member.value for member in annotation])
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return _payloads_of(annotation)
    simple: dict[Any, st.SearchStrategy[Any]] = {
        str: plausible_text,
        int: st.integers(min_value=-2, max_value=2**63),
        float: st.floats(allow_nan=False, allow_infinity=False),
        bool: st.booleans(),
        type(None): st.none(),
    }
    return simple.get(annotation, json_values)


def _payloads_of(model: type[BaseModel]) -> st.SearchStrategy[dict[str, Any]]:
    fields = {name: _typed(field.annotation) | json_values for name, field in model.model_fields.items()}
    fields.pop("run_id", None)
    return st.fixed_dictionaries({}, optional={**fields, "unexpected": json_values})


@pytest.fixture
def granted_run(host_run: Any) -> Any:
    """A running run whose binding grants every resource, so calls reach the handlers' own checks."""
    return host_run(
        resource_policy={
            "allowed_model_ids": ["*"],
            "allowed_tool_names": ["*"],
            "allowed_kb_ids": ["*"],
            "storage_areas": ["plugin", "binding", "workspace"],
            "platform_actions": ["*"],
        }
    )


@pytest.mark.parametrize("action", sorted(PROXY_REQUEST_MODELS), ids=str)
# Derandomized in CI (the same payloads on every run of the same code); randomized and longer under `make fuzz`.
@fuzz_settings(max_examples=40)
@given(data=st.data())
def test_any_proxy_payload_gets_a_result_or_a_typed_error(granted_run, action, data):
    payload = data.draw(_payloads_of(PROXY_REQUEST_MODELS[action]), label="payload")

    answer = "ok"
    try:
        granted_run.call(action.value, **payload)
    except AgentAPIException as exc:
        answer = f"{exc.code}: {exc.error.message}"

    assert not answer.startswith(ErrorCode.RUNTIME_ERROR.value), payload
