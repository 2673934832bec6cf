"""A runner written against LangBot's released plugin SDK (langbot-plugin, in its own virtualenv built by
`make lbp-venv`), run by LangBot's own runtime (`lbp rt`, a real process) through this host's real worker:
discovered as a `langbot` descriptor, bound, chatted with, its host calls answered and audited by the host's
handlers under the binding's policy, and cancelled.

The runtime's virtualenv missing is a failure, not a skip: `make test` builds it.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import httpx
import pytest

from foundation.version import HOST_VERSION
from tests.langbot_plugin.conftest import (
    API_ID,
    INTRUDER_ID,
    RUNNER_ID,
    assistant_reply,
    start_lbp_rt,
    stop_process,
    wait_first_delta,
)
from tests.processes import post_message, wait_terminal

pytestmark = [pytest.mark.integration, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def test_a_runtime_with_a_control_token_admits_only_a_host_presenting_it(tmp_path: Path) -> None:
    from langbot_sdk.protocol import AgentAPIException
    from runtimes.langbot import LangBotRuntime

    token = "t" * 40
    process, control = start_lbp_rt(tmp_path, {"LANGBOT_PLUGIN_RUNTIME_CONTROL_TOKEN": token})
    url = f"ws://127.0.0.1:{control}/control/ws"
    try:
        with pytest.raises(AgentAPIException) as refused:
            asyncio.run(LangBotRuntime(url, token="wrong" * 8).report())
        assert refused.value.code == "runtime_error"
        assert "refused the connection" in refused.value.error.message

        async def listing() -> int:
            runtime = LangBotRuntime(url, token=token)
            try:
                return len((await runtime.report()).runners)
            finally:
                await runtime.aclose()

        assert asyncio.run(listing()) == 0  # admitted; no plugins installed
    finally:
        stop_process(process)


def test_langbot_runner_chats_keeps_state_and_its_host_calls_are_authorized_and_audited(langbot_binding) -> None:
    from runners.models import ProxyCallAudit

    binding, _worker = langbot_binding
    first = wait_terminal(post_message(binding, "hello world", conversation_id="lbp-1"), timeout=60)
    assert first.status == "completed", (first.status, first.error)
    assert assistant_reply(first) == "hi: hello world (turn 1, history 1)"

    second = wait_terminal(post_message(binding, "peek actor", conversation_id="lbp-1"), timeout=60)
    assert second.status == "completed", (second.status, second.error)
    # Conversation state carried over; the history holds both turns so far; actor state is refused because
    # the binding enables the conversation scope only.
    assert assistant_reply(second) == "hi: peek actor (turn 2, history 3, actor refused (unauthorized))"

    caller = "lbptest/lbp-echo"
    expected = {("state_get", "ok", caller), ("state_set", "ok", caller), ("history_page", "ok", caller)}
    expected.add(("state_get", "unauthorized", caller))
    # The worker writes audit rows in batches, at most AUDIT_FLUSH_SECONDS after a call.
    deadline = time.monotonic() + 10
    while True:
        rows = set(ProxyCallAudit.objects.filter(run_id=str(second.run_id)).values_list("action", "outcome", "caller"))
        if expected <= rows or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert rows == expected

    version = wait_terminal(post_message(binding, "version", conversation_id="lbp-3"), timeout=60)
    # The same version string as the run context's `runtime.langbot_version`.
    assert assistant_reply(version) == f"version {HOST_VERSION}"

    # Another conversation starts its own count.
    other = wait_terminal(post_message(binding, "again", conversation_id="lbp-2"), timeout=60)
    assert assistant_reply(other) == "hi: again (turn 1, history 1)"


def test_a_langbot_runner_streams_a_model_answer_through_the_hosts_model_calls(langbot_binding) -> None:
    from runners.models import ProxyCallAudit
    from tests.factories import ModelFactory, ModelProviderFactory
    from tests.fakes.openai_server import chunk, fake_openai

    binding, _worker = langbot_binding
    with fake_openai() as fake:
        provider = ModelProviderFactory.create(workspace=binding.workspace, base_url=fake.base_url)
        model = ModelFactory.create(provider=provider, model_id="m-lbp")
        binding.runner_config = {**binding.runner_config, "model": model.model_id}
        binding.resource_policy = {"allowed_model_ids": [model.model_id]}
        binding.save(update_fields=["runner_config", "resource_policy"])
        fake.stream([chunk({"role": "assistant", "content": "Par"}), chunk({"content": "is"}, finish_reason="stop")])
        run = wait_terminal(post_message(binding, "ask capital of France?", conversation_id="lbp-llm"), timeout=60)
    assert run.status == "completed", (run.status, run.error)
    assert assistant_reply(run) == "Paris"
    assert fake.requests[0]["messages"][-1] == {"role": "user", "content": "capital of France?"}
    deadline = time.monotonic() + 10
    while not ProxyCallAudit.objects.filter(run_id=str(run.run_id)).exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    rows = set(ProxyCallAudit.objects.filter(run_id=str(run.run_id)).values_list("action", "resource", "outcome"))
    assert rows == {("invoke_llm_stream", "model_id=m-lbp", "ok")}


def test_a_langbot_runner_keeps_plugin_storage_where_the_binding_allows_it(langbot_binding) -> None:
    from runners.models import ProxyCallAudit

    binding, _worker = langbot_binding
    binding.resource_policy = {"storage_areas": []}
    binding.save(update_fields=["resource_policy"])
    refused = wait_terminal(post_message(binding, "store colour blue", conversation_id="lbp-s1"), timeout=60)
    assert refused.status == "failed"  # the binding grants no storage area: LangBot's SDK refuses it itself
    assert "storage" in refused.error["message"].lower(), refused.error

    binding.resource_policy = {"storage_areas": ["plugin"]}
    binding.save(update_fields=["resource_policy"])
    stored = wait_terminal(post_message(binding, "store colour blue", conversation_id="lbp-s2"), timeout=60)
    assert stored.status == "completed", (stored.status, stored.error)
    assert assistant_reply(stored) == "stored blue"
    deadline = time.monotonic() + 10
    expected = {("storage_set", "area=plugin key=colour", "ok"), ("storage_get", "area=plugin key=colour", "ok")}
    while True:
        rows = set(
            ProxyCallAudit.objects.filter(run_id=str(stored.run_id)).values_list("action", "resource", "outcome")
        )
        if expected <= rows or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert rows == expected


def test_cancelling_a_langbot_run_ends_it_cancelled(langbot_binding) -> None:
    from runners.lifecycle.services import run_cancel_request
    from runtimes.langbot.bridge import CANCELLED_MESSAGE

    binding, _worker = langbot_binding
    run = post_message(binding, "sleep", conversation_id="lbp-cancel")
    wait_first_delta(run)  # the runner is sleeping (two minutes unless the cancellation reaches it)
    run_cancel_request(run=run, reason="user stop")
    run = wait_terminal(run, timeout=30)
    assert run.status == "cancelled", (run.status, run.error)
    # Ended by the bridge on the cancel it passed to the LangBot runtime, not by the host's cancel grace.
    assert run.error["message"] == CANCELLED_MESSAGE, run.error


def test_a_langbot_plugin_cannot_act_for_another_plugins_run(langbot_binding) -> None:
    """The intruder names a run of the echo plugin that is in flight: the bridge stamps that run's token, but
    the caller is the intruder's installation, so the host refuses and audits it under the victim's run."""
    from runners.lifecycle.services import run_cancel_request
    from runners.models import ProxyCallAudit
    from tests.factories import AgentBindingFactory

    binding, _worker = langbot_binding
    victim = post_message(binding, "sleep", conversation_id="lbp-victim")
    wait_first_delta(victim)  # in flight through the bridge, its token held there
    intruder = AgentBindingFactory.create(
        runner_id=INTRUDER_ID, state_policy={"enable_state": True, "state_scopes": ["conversation"]}
    )
    attempt = wait_terminal(post_message(intruder, f"steal {victim.run_id}", conversation_id="x"), timeout=60)
    assert attempt.status == "completed", (attempt.status, attempt.error)
    assert assistant_reply(attempt) == "refused (unauthorized)"
    deadline = time.monotonic() + 10
    while True:
        rows = set(ProxyCallAudit.objects.filter(run_id=str(victim.run_id)).values_list("action", "outcome", "caller"))
        if rows or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert rows == {("state_get", "unauthorized", "lbptest/lbp-intruder")}
    run_cancel_request(run=victim, reason="done")
    assert wait_terminal(victim, timeout=30).status == "cancelled"


def test_a_refresh_reads_the_workers_catalog_and_leaves_its_runs_alone(langbot_binding) -> None:
    """The worker holds LangBot's one control connection and publishes what the runtime lists: a refresh in
    another process reads that instead of taking the connection, so the run in flight goes on."""
    from runners.lifecycle.services import run_cancel_request
    from runtimes.langbot.catalog import langbot_runners_refresh

    binding, _worker = langbot_binding
    run = post_message(binding, "sleep", conversation_id="lbp-refresh-in-flight")
    wait_first_delta(run)  # the runner is sleeping on the worker's connection
    refreshed = langbot_runners_refresh(settle=0)
    assert RUNNER_ID in refreshed.available, refreshed
    assert refreshed.missing == [], refreshed
    run.refresh_from_db()
    assert run.status == "running"
    run_cancel_request(run=run, reason="done")
    assert wait_terminal(run, timeout=30).status == "cancelled"


def test_a_run_on_a_superseded_connection_fails_retryable_and_the_worker_takes_it_back(
    langbot_binding, lbp_runtime: str
) -> None:
    """Another host connecting to LangBot's runtime takes its one control connection: the run in flight on the
    worker's fails with a retryable runtime_error, and the worker reconnects by itself."""
    from runtimes.langbot import LangBotRuntime

    binding, _worker = langbot_binding
    run = post_message(binding, "sleep", conversation_id="lbp-superseded")
    wait_first_delta(run)

    async def intrude() -> None:
        other = LangBotRuntime(lbp_runtime)
        try:
            await other.connection()
        finally:
            await other.aclose()

    asyncio.run(intrude())
    run = wait_terminal(run, timeout=30)
    assert run.status == "failed"
    assert (run.error["code"], run.error["retryable"]) == ("runtime_error", True), run.error
    after = wait_terminal(post_message(binding, "back", conversation_id="lbp-superseded-2"), timeout=90)
    assert assistant_reply(after) == "hi: back (turn 1, history 1)"


def test_a_langbot_runner_calls_tools_rerank_and_version_through_ctx_api(langbot_binding) -> None:
    """Every host call of the SDK's `ctx.api` answers in the SDK's own shapes: a tool's result is the object
    its SDK validates (a tool error is an answer too, and both end their `tool.call.started`), rerank scores
    come as index/relevance_score, the version is the host's."""
    from resources.mcp.services import mcp_server_refresh
    from resources.models import Model
    from runners.models import RunEvent
    from tests.factories import AgentBindingFactory, ModelFactory, ModelProviderFactory
    from tests.fakes.mcp_fixtures import stdio_server
    from tests.fakes.openai_server import fake_openai, rerank_answer

    binding, _worker = langbot_binding
    workspace = binding.workspace
    mcp_server_refresh(server=stdio_server(workspace, tools=["echo", "fail"]))
    with fake_openai() as fake:
        provider = ModelProviderFactory.create(workspace=workspace, base_url=fake.base_url)
        rerank = ModelFactory.create(provider=provider, model_id="rr-lbp", kind=Model.Kind.RERANK)
        calls = AgentBindingFactory.create(
            workspace=workspace,
            runner_id=API_ID,
            runner_config={"rerank_model": rerank.model_id},
            resource_policy={"allowed_model_ids": [rerank.model_id], "allowed_tool_names": ["echo", "fail"]},
        )
        fake.reply(rerank_answer((1, 0.9, None)))
        run = wait_terminal(post_message(calls, "go", conversation_id="lbp-api"), timeout=90)
    assert run.status == "completed", (run.status, run.error)
    reply = assistant_reply(run)
    lines = dict(line.split(": ", 1) for line in reply.splitlines())
    assert set(lines) == {"detail", "echo", "fail", "rerank", "version"}, reply  # no call raised in the runner
    assert json.loads(lines["detail"])["name"] == "echo"
    assert json.loads(lines["echo"]) == {"content": "hi"}
    # The MCP server's own words for a tool that raised.
    failed = {"content": "Error executing tool fail: boom", "is_error": True}
    assert json.loads(lines["fail"]) == failed
    assert json.loads(lines["rerank"]) == [{"index": 1, "relevance_score": 0.9}]
    assert json.loads(lines["version"]) == HOST_VERSION
    events = list(RunEvent.objects.filter(run=run, type__startswith="tool.call.").values_list("type", "data"))
    assert [kind for kind, _ in events] == ["tool.call.started", "tool.call.completed"] * 2, events
    assert [data.get("result") for kind, data in events if kind == "tool.call.completed"] == [
        {"content": "hi"},
        failed,
    ]


def test_through_the_rest_api_refreshed_bound_and_answered_on_post_events_wait(langbot_worker, start_langbot_web):
    """As a user would: an operator refreshes the runner list (the web process reaches the LangBot runtime),
    a binding is made over REST, and `POST /events?wait=` answers with the LangBot runner's reply."""
    from bindings.services import api_key_create
    from tests.factories import WorkspaceFactory

    web = start_langbot_web()
    workspace = WorkspaceFactory.create()
    _, key = api_key_create(workspace=workspace, is_operator=True)
    with httpx.Client(base_url=web.url, headers={"Authorization": f"Bearer {key}"}, timeout=60) as api:
        # The runtime launches its plugins once a host has connected: the first refresh may come before.
        deadline = time.monotonic() + 30
        while True:
            refreshed = api.post("/api/v1/runners/refresh")
            assert refreshed.status_code == 200, refreshed.text
            listed = {runner["runner_id"]: runner for runner in refreshed.json()["items"]}
            if RUNNER_ID in listed or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert listed[RUNNER_ID]["status"] == "available", listed
        created = api.post(
            "/api/v1/bindings",
            json={
                "binding_id": "lbp",
                "name": "LangBot SDK echo",
                "scope": {"scope_type": "workspace"},
                "event_types": ["message.received"],
                "runner_id": RUNNER_ID,
                "runner_config": {"greeting": "rest"},
                "state_policy": {"enable_state": True, "state_scopes": ["conversation"]},
            },
        )
        assert created.status_code == 201, created.text
        answered = api.post("/api/v1/events?wait=30", json={"conversation_id": "web-1", "input": {"text": "ping"}})
    assert answered.status_code == 200, answered.text
    [run] = answered.json()["runs"]
    assert (run["status"], run["output"]) == ("completed", "rest: ping (turn 1, history 1)")
