"""The local agent's person memory: facts the user asked it to remember, kept in the `person` state scope with
the turn they came from, shown to the model on later turns — only when the binding turns it on, the state
policy allows the scope and the host named a person."""

from __future__ import annotations

from typing import Any

from langbot_sdk.protocol import ActorContext, AgentRunContext
from tests.local_agent.host import ScriptedHost, build_context, drive, of_type, text
from tests.local_agent.plugin import runner

LocalAgentRunner = runner.LocalAgentRunner


def person_context(
    message: str, *, memory: bool = True, scopes: tuple[str, ...] = ("conversation", "person"), **kw: Any
) -> AgentRunContext:
    ctx = build_context(message, config={"person-memory": memory}, **kw)
    state = ctx.resources.state.model_copy(update={"scopes": list(scopes)})
    resources = ctx.resources.model_copy(update={"state": state})
    actor = {"actor_type": "user", "actor_id": "tg-42", "metadata": {"person_id": "p-1", "person_name": "Ann"}}
    return ctx.model_copy(update={"resources": resources, "actor": ActorContext.model_validate(actor)})


async def test_a_fact_told_to_remember_is_kept_with_its_turn_and_shown_on_a_later_turn():
    host = ScriptedHost()
    host.script_stream("m1", text("Noted."))
    first = await drive(LocalAgentRunner(), person_context("Remember that my cat is called Miso", run_id="run-1"), host)

    facts = host.state["memory"]["facts"]
    assert [(f["fact"], f["turn"]) for f in facts] == [("my cat is called Miso", "run-1")]
    assert of_type(first, "state.updated") == [{"scope": "person", "key": "memory", "value": host.state["memory"]}]

    host.script_stream("m1", text("Miso!"))
    await drive(LocalAgentRunner(), person_context("What is my cat called?", run_id="run-2"), host)
    sent = host.actions("invoke_llm_stream")[-1]["messages"]
    memory = [m["content"] for m in sent if "<person-memory" in str(m["content"])]
    assert memory
    assert "my cat is called Miso" in memory[0]


async def test_forget_everything_clears_the_memory():
    host = ScriptedHost()
    host.state["memory"] = {"facts": [{"fact": "likes tea", "turn": "run-0", "at": 1.0}]}
    host.script_stream("m1", text("Forgotten."))
    await drive(LocalAgentRunner(), person_context("forget everything"), host)
    assert host.state["memory"] == {"facts": []}
    assert "likes tea" not in str(host.actions("invoke_llm_stream")[-1]["messages"])


async def test_without_the_switch_or_the_person_scope_nothing_is_remembered():
    for ctx in (
        person_context("remember: I am vegan", memory=False),
        person_context("remember: I am vegan", scopes=("conversation",)),
    ):
        host = ScriptedHost()
        host.script_stream("m1", text("ok"))
        results = await drive(LocalAgentRunner(), ctx, host)
        assert "memory" not in host.state
        assert not [a for a in host.actions("state_get") if a.get("key") == "memory"]
        assert of_type(results, "state.updated") == []
