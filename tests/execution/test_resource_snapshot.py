"""The resource snapshot rule (docs/context-and-results.md, "The resource snapshot"): for a kind the runner's config
selects nothing of (no selector, or one left unset or empty), a run gets what the manifest asks for and the binding
allows; a selection narrows it.
And what the web chat and the API tell a runner they can do with its results."""

from __future__ import annotations

from bindings.policies import ResourcePolicy, StatePolicy
from langbot_sdk.protocol import AgentRunnerContextPolicy, AgentRunnerPermissions, DynamicFormItemSchema
from resources.models import KnowledgeBase, Model
from runners.actions.delivery import surface_delivery
from runners.orchestrator.resources import resources_build

MODELS = {i: Model(model_id=i, name=i, kind="llm") for i in ("gpt-a", "gpt-b")}
KBS = {i: KnowledgeBase(kb_id=i, name=i.upper()) for i in ("handbook", "faq")}
MODEL_SELECTOR = DynamicFormItemSchema.model_validate({"name": "model", "label": "Model", "type": "llm-model-selector"})
KB_SELECTOR = DynamicFormItemSchema.model_validate(
    {"name": "kbs", "label": "KBs", "type": "knowledge-base-multi-selector"}
)


def _build(schema: list, policy: dict, config: dict | None = None):
    resources, _ = resources_build(
        permissions=AgentRunnerPermissions(models=["invoke"], knowledge_bases=["retrieve"]),
        context_policy=AgentRunnerContextPolicy(),
        schema=schema,
        config=config or {},
        resource_policy=ResourcePolicy.model_validate(policy),
        state_policy=StatePolicy(),
        models_read=lambda ids: {k: v for k, v in MODELS.items() if ids is None or k in ids},
        tools_read=lambda names: {},
        knowledge_bases_read=lambda ids: {k: v for k, v in KBS.items() if ids is None or k in ids},
    )
    return [m.model_id for m in resources.models], [kb.kb_id for kb in resources.knowledge_bases]


def test_a_runner_with_no_selector_gets_what_the_binding_allows():
    assert _build([], {"allowed_model_ids": ["gpt-b", "gone"], "allowed_kb_ids": ["handbook"]}) == (
        ["gpt-b"],
        ["handbook"],
    )


def test_a_wildcard_allows_every_one_of_the_workspace_to_a_runner_with_no_selector():
    assert _build([], {"allowed_model_ids": ["*"], "allowed_kb_ids": ["*"]}) == (
        ["gpt-a", "gpt-b"],
        ["handbook", "faq"],
    )


def test_a_selector_narrows_the_allowed_to_what_it_selects():
    policy = {"allowed_model_ids": ["*"], "allowed_kb_ids": ["*"]}
    assert _build([MODEL_SELECTOR, KB_SELECTOR], policy, {"model": "gpt-a", "kbs": ["faq"]}) == (["gpt-a"], ["faq"])


def test_a_selector_left_empty_does_not_narrow():
    policy = {"allowed_model_ids": ["gpt-b"], "allowed_kb_ids": ["*"]}
    # Unset or empty, the selector means "what the binding allows".
    assert _build([MODEL_SELECTOR, KB_SELECTOR], policy, {}) == (["gpt-b"], ["handbook", "faq"])
    assert _build([MODEL_SELECTOR, KB_SELECTOR], policy, {"model": "", "kbs": []}) == (["gpt-b"], ["handbook", "faq"])
    # A selection the binding does not allow is not widened back to the binding's list.
    assert _build([MODEL_SELECTOR, KB_SELECTOR], policy, {"model": "gpt-a", "kbs": ["gone"]}) == ([], [])


def test_each_kind_follows_its_own_selector():
    policy = {"allowed_model_ids": ["*"], "allowed_kb_ids": ["handbook"]}
    # A model field but no knowledge-base field: the allowed knowledge base comes without being picked.
    assert _build([MODEL_SELECTOR], policy, {"model": "gpt-b"}) == (["gpt-b"], ["handbook"])


def test_nothing_the_binding_does_not_allow():
    assert _build([], {}) == ([], [])


def test_the_web_chat_and_the_api_say_they_edit_and_react_and_take_fragments():
    for surface in ("webui", "api"):
        delivery = surface_delivery(surface)
        assert (delivery.supports_streaming, delivery.supports_edit, delivery.supports_reaction) == (True, True, True)
        assert delivery.capabilities["stream_mode"] == "fragments"
