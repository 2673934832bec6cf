"""Every proxy action against another workspace's objects (issue 22, BOLA matrix).

A run of workspace `mine`, whose manifest asks for everything and whose binding allows the other workspace's
ids by name (their model, tool, knowledge base), calls every runtime → host action of the handler registry
naming the other workspace's objects (`theirs`). Each call is refused with the listed codes, or answers
from the run's own workspace — showing nothing of theirs; nothing of theirs changes. An action of the
registry that ACTIONS does not list fails the test.
"""

from __future__ import annotations

import base64
from typing import Any

import pytest

from hostapi.dispatch import FAMILIES
from langbot_sdk.protocol import PROXY_REQUEST_MODELS, AgentAPIException
from tests.handlers.conftest import host_run  # noqa: F401 - the fixture, shared with the handler tests
from tests.security.conftest import MARKER, Mine, Theirs, snapshot

pytestmark = pytest.mark.django_db(transaction=True)

REFUSED = {"not_found", "unauthorized"}
ANSWERS = None
"""The call succeeds on the run's own workspace; its answer must show nothing of theirs."""


def _actions(ids: dict[str, str]) -> dict[str, tuple[dict[str, Any], set[str] | None]]:
    hello = [{"role": "user", "content": "hi"}]
    state = {"scope": "conversation", "key": f"{MARKER}-key"}
    storage = {"area": "workspace", "key": f"{MARKER}-key"}
    return {
        "invoke_llm": ({"model_id": ids["model_id"], "messages": hello}, REFUSED),
        "invoke_llm_stream": ({"model_id": ids["model_id"], "messages": hello}, REFUSED),
        "invoke_rerank": ({"model_id": ids["model_id"], "query": "q", "documents": ["a"]}, REFUSED),
        "count_tokens": ({"model_id": ids["model_id"], "text": "hi"}, REFUSED),
        "get_tool_detail": ({"tool_name": ids["tool_name"]}, REFUSED),
        "call_tool": ({"tool_name": ids["tool_name"], "parameters": {}}, REFUSED),
        "retrieve_knowledge_base": ({"kb_id": ids["kb_id"], "query_text": "q"}, REFUSED),
        # Another conversation id is outside the run's scope, whichever workspace it is in.
        "history_page": ({"conversation_id": ids["conversation_id"]}, REFUSED),
        "history_search": ({"query": MARKER}, ANSWERS),
        "event_get": ({"event_id": ids["event_id"]}, REFUSED),
        "event_page": ({"conversation_id": ids["conversation_id"]}, REFUSED),
        "artifact_metadata": ({"artifact_id": ids["artifact_id"]}, REFUSED),
        "artifact_read": ({"artifact_id": ids["artifact_id"]}, REFUSED),
        "artifact_stream": ({"artifact_id": ids["artifact_id"]}, REFUSED),
        # An upload opens in the run's own workspace; an upload id the run did not open is nobody's
        # (another run's, of any workspace: tests/handlers/test_artifact_upload.py).
        "artifact_upload_open": ({"name": f"{MARKER}.bin"}, ANSWERS),
        "artifact_upload_chunk": ({"upload_id": ids["artifact_id"], "offset": 0, "data_base64": "eA=="}, REFUSED),
        "artifact_upload_finish": ({"upload_id": ids["artifact_id"], "size": 1, "sha256": "0" * 64}, REFUSED),
        "artifact_upload_abort": ({"upload_id": ids["artifact_id"]}, REFUSED),
        # State and storage keys live under the run's own workspace (and runner, binding, conversation).
        "state_get": (state, ANSWERS),
        "state_set": ({**state, "value": "mine"}, ANSWERS),
        "state_delete": (state, ANSWERS),
        "state_list": ({"scope": "conversation"}, ANSWERS),
        "storage_get": (storage, ANSWERS),
        "storage_set": ({**storage, "value_base64": base64.b64encode(b"mine").decode()}, ANSWERS),
        "storage_delete": (storage, ANSWERS),
        "storage_list": ({"area": "workspace"}, ANSWERS),
        # Their bot and chat: a run delivers only into its own conversation.
        "platform_request_action": (
            {
                "action": "message.send",
                "target": {"bot_id": ids["bot_id"], "chat_id": f"{MARKER}-chat"},
                "payload": {"text": "hi"},
            },
            {"not_found", "unauthorized", "invalid_argument", "runtime_error"},
        ),
    }


def test_every_proxy_action_is_in_the_matrix():
    listed = set(_actions(dict.fromkeys(_ID_NAMES, "x")))

    assert {action.value for action in FAMILIES} == listed
    assert {action.value for action in PROXY_REQUEST_MODELS} == listed


_ID_NAMES = ("model_id", "tool_name", "kb_id", "conversation_id", "event_id", "artifact_id", "bot_id")


def test_no_proxy_action_reaches_another_workspaces_objects(host_run: Any, theirs: Theirs, mine: Mine) -> None:  # noqa: F811
    ids = theirs.ids
    run = host_run(
        workspace=mine.workspace,
        resource_policy={
            "allowed_model_ids": [ids["model_id"]],
            "allowed_tool_names": [ids["tool_name"]],
            "allowed_kb_ids": [ids["kb_id"]],
            "storage_areas": ["plugin", "binding", "workspace"],
            "platform_actions": ["*"],
        },
        state_policy={"enable_state": True, "state_scopes": ["conversation", "actor", "subject", "runner", "binding"]},
        config={"model": ids["model_id"]},
    )
    before = snapshot(theirs.workspace)

    wrong: list[str] = []
    for action, (payload, refusal) in _actions(ids).items():
        try:
            answer = run.call(action, **payload)
        except AgentAPIException as exc:
            if refusal is None or exc.error.code not in refusal:
                wrong.append(
                    f"{action}: refused {exc.error.code} ({exc.error.message}), expected {refusal or 'an answer'}"
                )
            continue
        if refusal is not None:
            wrong.append(f"{action}: answered {str(answer)[:200]}, expected a refusal in {sorted(refusal)}")
        elif MARKER in _without_echo(str(answer), payload):
            wrong.append(f"{action}: the answer shows their objects: {str(answer)[:300]}")

    assert wrong == [], "\n".join(wrong)
    assert snapshot(theirs.workspace) == before


def _without_echo(text: str, payload: dict[str, Any]) -> str:
    """The answer less what the call itself sent (a search answer repeats its query; a state key its key)."""
    for value in sorted((v for v in payload.values() if isinstance(v, str)), key=len, reverse=True):
        text = text.replace(value, "")
    return text
