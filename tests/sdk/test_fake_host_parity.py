"""The fake host of `langbot_sdk.testing` and the real host give the same answer to the same proxy call.

Each scenario makes a real run (real rows, the real context builder's session, the real proxy handlers on a
real database, a local OpenAI-compatible provider, a real MCP server), then a `FakeHost` for the very
context the real host built, seeds both alike, and sends both the same raw wire calls — bypassing the SDK
proxy's own checks, so the hosts' checks are what answer. Answers are compared without the values only a
database assigns (ids, cursors, timestamps); refusals by error code.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import time
from collections.abc import Callable
from typing import Any

import pytest

from artifacts.models import Artifact
from artifacts.services import artifact_create_from_bytes
from artifacts.storage import artifact_storage
from langbot_sdk.authorization import RunGrant
from langbot_sdk.protocol import AgentAPIException, limits
from langbot_sdk.testing import FakeHost
from resources.mcp.services import mcp_server_refresh
from tests.factories import WorkspaceFactory
from tests.fakes.mcp_fixtures import mcp_cleanup_fixture, stdio_server  # noqa: F401
from tests.fakes.openai_server import FakeOpenAI, chunk, completion
from tests.handlers.conftest import FULL_PERMISSIONS, HostRun, fake, host_run, model_run, post_event  # noqa: F401

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("mcp_cleanup")]

# Values a database assigns; everything else must match.
VOLATILE = {
    "item_id", "cursor", "created_at", "event_id", "artifact_id", "time", "expires_at", "request_id", "upload_id",
}  # fmt: skip
Call = tuple[str, dict[str, Any]]


class Pair:
    """A real run and a fake host holding the same context."""

    def __init__(self, real: HostRun) -> None:
        self.real = real
        self.fake = FakeHost(real.built.context, plugin_identity=real.identity)

    def seed_message(self, text: str) -> None:
        post_event(self.real.workspace, self.real.conversation_id, text)
        self.fake.add_message("user", text)

    def answers(self, calls: list[Call]) -> tuple[list[Any], list[Any]]:
        return [self._real(a, d) for a, d in calls], [self._fake(a, d) for a, d in calls]

    def _real(self, action: str, data: dict[str, Any]) -> Any:
        try:
            return stable(self.real.call(action, **data))
        except AgentAPIException as exc:
            return refusal(exc)

    def _fake(self, action: str, data: dict[str, Any]) -> Any:
        try:
            return stable(asyncio.run(self.fake.proxy_call(action, data)))
        except AgentAPIException as exc:
            return refusal(exc)


def stable(answer: Any) -> Any:
    if isinstance(answer, dict):
        return {
            k: (v is not None if k in ("next_cursor", "prev_cursor") else stable(v))
            for k, v in answer.items()
            if k not in VOLATILE
        }
    if isinstance(answer, list):
        return [stable(v) for v in answer]
    return answer


def refusal(exc: AgentAPIException) -> dict[str, Any]:
    # A platform action's refusal says what became of the request (refused, pending_approval).
    status = exc.error.details.get("status")
    return {"error": exc.code, **({"status": status} if isinstance(status, str) else {})}


def streamed_text(frames: Any) -> Any:
    if not isinstance(frames, list):
        return frames
    return {
        "text": "".join((f["delta"].get("content") or "") for f in frames),
        "finish_reason": frames[-1].get("finish_reason"),
    }


@pytest.fixture(autouse=True)
def _remove_blobs():
    yield
    storage = artifact_storage()
    for key in Artifact.objects.values_list("storage_key", flat=True):
        storage.delete(key)


# --- scenarios: each returns (real answers, fake answers) --------------------------------------------

Scenario = Callable[[pytest.FixtureRequest], tuple[list[Any], list[Any]]]


def _history(request: pytest.FixtureRequest) -> tuple[list[Any], list[Any]]:
    workspace = WorkspaceFactory.create()
    post_event(workspace, "conv-a", "one")
    post_event(workspace, "conv-a", "two")
    pair = Pair(request.getfixturevalue("host_run")(workspace=workspace, conversation_id="conv-a", text="three"))
    for text in ("one", "two", "three"):
        pair.fake.add_message("user", text)
    return pair.answers(
        [
            ("history_page", {"limit": 2}),
            ("history_page", {"limit": 500}),  # clamped to 100, not refused
            ("history_page", {"limit": 1, "direction": "forward"}),
            ("history_page", {"conversation_id": "conv-other"}),
            ("history_page", {"before_cursor": "not-a-cursor"}),
            ("history_page", {"limit": 0}),
        ]
    )


def _history_not_granted(request: pytest.FixtureRequest) -> tuple[list[Any], list[Any]]:
    permissions = {**FULL_PERMISSIONS, "history": [], "events": []}
    pair = Pair(request.getfixturevalue("host_run")(permissions=permissions))
    return pair.answers([("history_page", {}), ("event_page", {}), ("history_search", {"query": "x"})])


def _state(request: pytest.FixtureRequest) -> tuple[list[Any], list[Any]]:
    policy = {"enable_state": True, "state_scopes": ["conversation", "runner"]}
    pair = Pair(request.getfixturevalue("host_run")(state_policy=policy))
    big = "x" * (limits.STATE_VALUE_MAX_BYTES + 1)
    return pair.answers(
        [
            ("state_get", {"scope": "conversation", "key": "n"}),
            ("state_set", {"scope": "conversation", "key": "n", "value": {"count": 1}}),
            ("state_set", {"scope": "conversation", "key": "m", "value": [1, 2]}),
            ("state_get", {"scope": "conversation", "key": "n"}),
            ("state_list", {"scope": "conversation", "limit": 1000}),
            ("state_list", {"scope": "conversation", "prefix": "m"}),
            ("state_delete", {"scope": "conversation", "key": "n"}),
            ("state_delete", {"scope": "conversation", "key": "n"}),
            ("state_get", {"scope": "runner", "key": "n"}),
            ("state_get", {"scope": "actor", "key": "n"}),  # not enabled by the policy
            ("state_set", {"scope": "conversation", "key": "big", "value": big}),
            ("state_set", {"scope": "conversation", "key": "", "value": 1}),
        ]
    )


def _storage(request: pytest.FixtureRequest) -> tuple[list[Any], list[Any]]:
    pair = Pair(request.getfixturevalue("host_run")(resource_policy={"storage_areas": ["plugin", "binding"]}))
    value = base64.b64encode(b"\x00blob").decode()
    over = base64.b64encode(b"x" * (limits.STORAGE_VALUE_MAX_BYTES + 1)).decode()
    return pair.answers(
        [
            ("storage_get", {"area": "plugin", "key": "k"}),
            ("storage_set", {"area": "plugin", "key": "k", "value_base64": value}),
            ("storage_get", {"area": "plugin", "key": "k"}),
            ("storage_get", {"area": "binding", "key": "k"}),  # another area, another owner
            ("storage_list", {"area": "plugin"}),
            ("storage_delete", {"area": "plugin", "key": "k"}),
            ("storage_get", {"area": "workspace", "key": "k"}),  # not granted by the binding
            ("storage_set", {"area": "plugin", "key": "big", "value_base64": over}),
            ("storage_set", {"area": "plugin", "key": "k", "value_base64": "not base64!"}),
        ]
    )


def _artifacts(request: pytest.FixtureRequest) -> tuple[list[Any], list[Any]]:
    pair = Pair(request.getfixturevalue("host_run")(conversation_id="conv-a"))
    data = b"0123456789" * 10
    mine = artifact_create_from_bytes(
        workspace=pair.real.workspace, data=data, name="n.txt", mime_type="text/plain",
        conversation_id="conv-a", source=Artifact.Source.UPLOAD,
    )  # fmt: skip
    other = artifact_create_from_bytes(
        workspace=pair.real.workspace, data=b"secret", name="o.txt", mime_type="text/plain",
        conversation_id="conv-b", source=Artifact.Source.UPLOAD,
    )  # fmt: skip
    fake_mine = pair.fake.add_artifact(data, name="n.txt", mime_type="text/plain")
    fake_other = pair.fake.add_artifact(b"secret", name="o.txt", mime_type="text/plain", shared=True)

    def calls(artifact_id: str, other_id: str) -> list[Call]:
        return [
            ("artifact_metadata", {"artifact_id": artifact_id}),
            ("artifact_read", {"artifact_id": artifact_id, "offset": 95, "length": 10}),
            ("artifact_read", {"artifact_id": artifact_id, "length": 10**9}),  # clamped to 10 MiB
            ("artifact_stream", {"artifact_id": artifact_id, "chunk_size": 40}),
            ("artifact_metadata", {"artifact_id": other_id}),
            ("artifact_read", {"artifact_id": "no-such-artifact"}),
        ]

    real = [pair._real(a, d) for a, d in calls(str(mine.artifact_id), str(other.artifact_id))]
    fake_answers = [pair._fake(a, d) for a, d in calls(fake_mine, fake_other)]
    return real, fake_answers


def _uploads(request: pytest.FixtureRequest) -> tuple[list[Any], list[Any]]:
    pair = Pair(request.getfixturevalue("host_run")(conversation_id="conv-a"))
    data = b"uploaded text\n" * 100
    digest = hashlib.sha256(data).hexdigest()

    def steps(answer: Callable[[str, dict[str, Any]], Any], raw: Callable[[str, dict[str, Any]], Any]) -> list[Any]:
        """One upload that works, then the refusals; the ids each host assigned are threaded through."""
        answers = []
        opened = raw("artifact_upload_open", {"name": "notes.txt", "mime_type": "text/plain", "size": len(data)})
        answers.append(stable(opened))
        upload_id = opened["upload_id"]
        for call in [
            ("artifact_upload_chunk", {"upload_id": upload_id, "offset": 0, "data_base64": b64(data[:1000])}),
            ("artifact_upload_chunk", {"upload_id": upload_id, "offset": 5, "data_base64": b64(b"x")}),  # out of order
            ("artifact_upload_chunk", {"upload_id": upload_id, "offset": 1000, "data_base64": b64(data[1000:])}),
            ("artifact_upload_finish", {"upload_id": upload_id, "size": len(data), "sha256": digest}),
            ("artifact_upload_chunk", {"upload_id": upload_id, "offset": 0, "data_base64": b64(b"x")}),  # finished
            ("artifact_upload_open", {"name": "big.bin", "size": 100 * 1024 * 1024 + 1}),  # over the limit
            ("artifact_upload_abort", {"upload_id": "no-such-upload"}),
        ]:
            answers.append(answer(*call))
        second = raw("artifact_upload_open", {"name": "bad.bin"})["upload_id"]
        answers.append(answer("artifact_upload_chunk", {"upload_id": second, "offset": 0, "data_base64": b64(b"ab")}))
        answers.append(answer("artifact_upload_finish", {"upload_id": second, "size": 2, "sha256": "0" * 64}))
        return answers

    real = steps(pair._real, lambda a, d: pair.real.call(a, **d))
    fake_answers = steps(pair._fake, lambda a, d: asyncio.run(pair.fake.proxy_call(a, d)))
    return real, fake_answers


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _models(request: pytest.FixtureRequest) -> tuple[list[Any], list[Any]]:
    provider: FakeOpenAI = request.getfixturevalue("fake")
    pair = Pair(request.getfixturevalue("model_run")())
    hi = [{"role": "user", "content": "hi"}]
    usage = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    provider.reply(completion("hello there", usage=usage))
    pair.fake.models.reply("m1", "hello there", usage=usage)
    real = [pair._real("invoke_llm", {"model_id": "m1", "messages": hi})]
    fake_answers = [pair._fake("invoke_llm", {"model_id": "m1", "messages": hi})]

    provider.stream([chunk({"role": "assistant", "content": "he"}), chunk({"content": "llo"}, finish_reason="stop")])
    pair.fake.models.stream("m1", ["he", "llo"])
    real.append(streamed_text(pair._real("invoke_llm_stream", {"model_id": "m1", "messages": hi})))
    fake_answers.append(streamed_text(pair._fake("invoke_llm_stream", {"model_id": "m1", "messages": hi})))

    provider.fail(429, "slow down")
    pair.fake.models.fail("m1", "rate_limited")
    refused: list[Call] = [
        ("invoke_llm", {"model_id": "m1", "messages": hi}),  # the provider's 429
        ("invoke_llm", {"model_id": "m2", "messages": hi}),  # not in the run's resources
        ("invoke_llm", {"model_id": "", "messages": hi}),
        ("invoke_rerank", {"model_id": "m1", "query": "q", "documents": ["a"]}),  # an LLM cannot rerank
    ]
    for action, data in refused:
        real.append(pair._real(action, data))
        fake_answers.append(pair._fake(action, data))
    return real, fake_answers


def _tools(request: pytest.FixtureRequest) -> tuple[list[Any], list[Any]]:
    workspace = WorkspaceFactory.create()
    mcp_server_refresh(server=stdio_server(workspace))
    real = request.getfixturevalue("host_run")(workspace=workspace, resource_policy={"allowed_tool_names": ["add"]})
    pair = Pair(real)
    detail = real.call("get_tool_detail", tool_name="add")
    pair.fake.tools.add(
        "add",
        lambda args: str(args["a"] + args["b"]),
        description=detail["description"],
        parameters=detail["parameters"],
    )
    return pair.answers(
        [
            ("get_tool_detail", {"tool_name": "add"}),
            ("call_tool", {"tool_name": "add", "parameters": {"a": 2, "b": 3}}),
            ("call_tool", {"tool_name": "add", "parameters": {"a": "two"}}),
            ("call_tool", {"tool_name": "echo", "parameters": {"text": "x"}}),  # not allowed by the binding
        ]
    )


def _platform(request: pytest.FixtureRequest) -> tuple[list[Any], list[Any]]:
    policy = {"platform_actions": ["message.reaction"], "require_action_approval": True}
    pair = Pair(request.getfixturevalue("host_run")(resource_policy=policy))
    return pair.answers(
        [
            ("platform_request_action", {"action": "message.reaction", "target": {}, "payload": {"emoji": "+1"}}),
            ("platform_request_action", {"action": "message.send", "target": {}, "payload": {"text": "hi"}}),
            # what became of a request: an unknown one, and a lookup naming none
            ("platform_request_action", {"action": "action.get", "target": {"request_id": 987654321}}),
            ("platform_request_action", {"action": "action.get", "target": {}}),
        ]
    )


def _deadline(request: pytest.FixtureRequest) -> tuple[list[Any], list[Any]]:
    policy = {"enable_state": True, "state_scopes": ["conversation"]}
    real = request.getfixturevalue("host_run")(state_policy=policy)
    past = time.time() - 1
    real.deadline_at = past
    pair = Pair(real)
    pair.fake.ctx = pair.fake.ctx.model_copy(
        update={"runtime": pair.fake.ctx.runtime.model_copy(update={"deadline_at": past})}
    )
    return pair.answers([("state_get", {"scope": "conversation", "key": "k"})])


def _snapshot(request: pytest.FixtureRequest) -> tuple[list[Any], list[Any]]:
    """The fake host's snapshot of the real host's context is the one the real host froze."""
    policy = {"storage_areas": ["plugin"], "platform_actions": ["message.send"]}
    state = {"enable_state": True, "state_scopes": ["actor"]}
    real = request.getfixturevalue("host_run")(resource_policy=policy, state_policy=state)
    session = real.built.session
    grant = RunGrant.of_context(
        real.built.context,
        plugin_identity=real.identity,
        runner_id=session.scope.runner_id,
        binding_id=session.scope.binding_id,
    )

    def seen(holder: Any) -> list[Any]:
        return [
            holder.resources,
            holder.available_apis,
            holder.state_allows("actor"),
            holder.state_allows("conversation"),
            holder.scope.state_key("actor"),
            holder.scope.state_key("conversation"),
        ]

    return seen(session), seen(grant)


# Grouped so that each test pays the database flush once (a transactional test's teardown is most of its cost).
SCENARIOS: dict[str, list[Scenario]] = {
    "history, events and artifacts": [_history, _history_not_granted, _artifacts, _uploads],
    "state, storage and the deadline": [_state, _storage, _deadline, _snapshot],
    "models, tools and platform actions": [_models, _tools, _platform],
}


@pytest.mark.parametrize("group", SCENARIOS)
def test_the_fake_host_answers_as_the_real_host(group: str, request: pytest.FixtureRequest):
    for scenario in SCENARIOS[group]:
        real, fake_answers = scenario(request)

        assert fake_answers == real, scenario.__name__
