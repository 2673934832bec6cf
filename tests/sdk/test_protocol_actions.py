"""Wire actions: every proxy action has a strict request model carrying the run id and caps apply."""

import pytest
from pydantic import ValidationError

from langbot_sdk.protocol import (
    HISTORY_PAGE_MAX,
    HISTORY_SEARCH_TOP_K_MAX,
    HOST_TO_RUNTIME_ACTIONS,
    PROXY_REQUEST_MODELS,
    RUNTIME_TO_HOST_ACTIONS,
    STATE_LIST_MAX_KEYS,
    STATE_VALUE_MAX_BYTES,
    Action,
    ArtifactReadRequest,
    HistoryPageRequest,
    HistorySearchRequest,
    StateListRequest,
    StateSetRequest,
    StorageSetRequest,
)

# docs/protocol.md, "Runtime → host" lists these names; a bridge to LangBot's runtime depends on them being exactly so.
DESIGN_RUNTIME_TO_HOST = [
    *("invoke_llm", "invoke_llm_stream", "invoke_rerank", "count_tokens"),
    *("get_tool_detail", "call_tool", "retrieve_knowledge_base"),
    *("history_page", "history_search", "event_get", "event_page"),
    *("artifact_metadata", "artifact_read", "artifact_stream"),
    *("artifact_upload_open", "artifact_upload_chunk", "artifact_upload_finish", "artifact_upload_abort"),
    *("state_get", "state_set", "state_delete", "state_list"),
    *("storage_get", "storage_set", "storage_delete", "storage_list"),
    "platform_request_action",
]


def test_action_names_are_the_ones_of_the_design():
    assert {a.value for a in HOST_TO_RUNTIME_ACTIONS} == {
        "list_agent_runners",
        "run_agent",
        "cancel_run",
        "run_input",
        "ping",
    }
    assert sorted(a.value for a in RUNTIME_TO_HOST_ACTIONS) == sorted(DESIGN_RUNTIME_TO_HOST)


@pytest.mark.parametrize("action", sorted(RUNTIME_TO_HOST_ACTIONS))
def test_every_proxy_action_has_a_request_model_that_requires_a_run_id(action):
    model = PROXY_REQUEST_MODELS[action]

    assert {"run_id", "caller_plugin_identity"} <= set(model.model_fields)
    assert model.model_fields["run_id"].is_required()
    assert model.model_fields["caller_plugin_identity"].default is None


@pytest.mark.parametrize("action", sorted(RUNTIME_TO_HOST_ACTIONS))
def test_every_proxy_request_rejects_unknown_fields(action):
    with pytest.raises(ValidationError, match="sneaky"):
        PROXY_REQUEST_MODELS[action].model_validate({"run_id": "run-1", "sneaky": True})


def test_history_page_defaults_follow_the_protocol():
    request = HistoryPageRequest(run_id="run-1")

    assert (request.limit, request.direction, request.include_artifacts) == (50, "backward", False)


@pytest.mark.parametrize(
    ("model", "fields"),
    [
        (HistoryPageRequest, {"limit": HISTORY_PAGE_MAX + 1}),
        (HistoryPageRequest, {"limit": 0}),
        (HistoryPageRequest, {"direction": "sideways"}),
        (HistorySearchRequest, {"query": "db", "top_k": HISTORY_SEARCH_TOP_K_MAX + 1}),
        (HistorySearchRequest, {"query": "db", "filters": {"colour": "red"}}),
        (StateListRequest, {"scope": "conversation", "limit": STATE_LIST_MAX_KEYS + 1}),
        (StateSetRequest, {"scope": "conversation", "key": "k", "value": "x" * STATE_VALUE_MAX_BYTES}),
        (StateSetRequest, {"scope": "conversation", "key": "bad\nkey", "value": 1}),
        (StateSetRequest, {"scope": "planet", "key": "k", "value": 1}),
        (StorageSetRequest, {"area": "plugin", "key": "k", "value_base64": "%%%"}),
        (StorageSetRequest, {"area": "cloud", "key": "k", "value_base64": "aGk="}),
        (ArtifactReadRequest, {"artifact_id": "a", "length": 10 * 1024 * 1024 + 1}),
        (ArtifactReadRequest, {"artifact_id": "a", "offset": -1}),
    ],
)
def test_requests_beyond_the_caps_or_outside_the_enums_are_refused(model, fields):
    with pytest.raises(ValidationError):
        model.model_validate({"run_id": "run-1", **fields})


def test_request_at_the_cap_is_accepted():
    request = HistoryPageRequest(run_id="run-1", limit=HISTORY_PAGE_MAX, caller_plugin_identity="langbot/qa-runner")

    assert request.limit == HISTORY_PAGE_MAX


def test_action_values_are_plain_strings_on_the_wire():
    assert Action("state_get") is Action.STATE_GET
    assert f"{Action.STATE_GET}" == "state_get"
