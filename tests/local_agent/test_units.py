"""The local-agent's pure parts: config parsing, fences (placement, lifetimes, must-keep, budget fractions),
the compaction trigger, truncation and token estimates."""

from __future__ import annotations

import pytest

from tests.local_agent.plugin import budget, config, context, history, tools

FenceKind, FenceInjection, FenceRegistry = context.FenceKind, context.FenceInjection, context.FenceRegistry


# --- config -------------------------------------------------------------------------------------------


def test_a_langbot_block_is_read_with_its_own_field_names():
    parsed = config.config_parse(
        {
            "model": {"primary": "m1", "fallbacks": ["m2", "m1", ""], "reasoning": {"m1": "high"}},
            "max-round": 4,
            "prompt": [{"role": "system", "content": "Be kind."}, {"role": "user", "content": ""}],
            "knowledge-bases": ["kb1", "kb1", "kb2"],
            "rerank-model": "rr",
            "rerank-top-k": 3,
            "box-session-id-template": "{global}",
        }
    )

    assert parsed.model_chain == ("m1", "m2")
    assert parsed.max_round == 4
    assert parsed.prompt == (config.PromptMessage("system", "Be kind."),)
    assert parsed.knowledge_bases == ("kb1", "kb2")
    assert (parsed.rerank_model, parsed.rerank_top_k) == ("rr", 3)
    assert parsed.ignored == {"box-session-id-template": "{global}"}


def test_the_plugin_form_shape_and_the_old_single_knowledge_base_are_read_too():
    parsed = config.config_parse({"model": "m1", "fallback-models": ["m3"], "knowledge-base": "old-kb"})

    assert parsed.model_chain == ("m1", "m3")
    assert parsed.knowledge_bases == ("old-kb",)


def test_defaults_fill_missing_fields_and_numbers_are_clamped():
    parsed = config.config_parse({"model": "m1", "retrieval-top-k": 500, "max-tool-iterations": -3, "timeout": "x"})

    assert parsed.retrieval_top_k == 50
    assert parsed.max_tool_iterations == 0
    assert parsed.timeout == 120
    assert parsed.parallel_tool_calls is True
    assert parsed.prompt == (config.PromptMessage("system", config.DEFAULT_SYSTEM_PROMPT),)
    assert parsed.history_fetch_limit == 200


# --- fences -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "match"),
    [
        (FenceKind("Not_Kebab", "user", "after-system", "persisted"), "kebab-case"),
        (FenceKind("a", "user", "somewhere", "persisted"), "placement"),
        (FenceKind("a", "user", "after-system", "persisted", max_budget_fraction=0), "max_budget_fraction"),
    ],
)
def test_a_wrongly_declared_fence_kind_is_refused(kind, match):
    with pytest.raises(context.FenceError, match=match):
        FenceRegistry([kind])


def test_a_fence_kind_declared_twice_is_refused():
    kind = FenceKind("a", "user", "after-system", "persisted")
    with pytest.raises(context.FenceError, match="twice"):
        FenceRegistry([kind, kind])


REGISTRY = FenceRegistry(
    [
        FenceKind("memory", "system", "after-system", "persisted", must_keep=True),
        FenceKind("quote", "user", "before-current-user", "turn-only", max_budget_fraction=0.1),
        FenceKind("notes", "user", "after-current-user", "turn-only"),
    ]
)
SYSTEM = [{"role": "system", "content": "sys"}]
HISTORY = [{"role": "user", "content": "old question"}, {"role": "assistant", "content": "old answer"}]
CURRENT = {"role": "user", "content": "now"}


def assemble(injections, *, budget_tokens=10_000, turn="t2", history_messages=HISTORY):
    return context.context_assemble(
        registry=REGISTRY,
        system=SYSTEM,
        history=history_messages,
        current_user=CURRENT,
        injections=injections,
        turn=turn,
        budget_tokens=budget_tokens,
        counter=budget.TokenCounter(),
    )


def test_fences_are_placed_by_kind_in_their_role_and_tag():
    assembled = assemble(
        [FenceInjection("notes", "n", {}, "t2"), FenceInjection("quote", "q", {"src": "a&b"}, "t2"),
         FenceInjection("memory", "m", {}, "t1")]
    )  # fmt: skip

    assert assembled.messages == [
        SYSTEM[0],
        {"role": "system", "content": "<memory>\nm\n</memory>"},
        *HISTORY,
        {"role": "user", "content": '<quote src="a&amp;b">\nq\n</quote>'},
        CURRENT,
        {"role": "user", "content": "<notes>\nn\n</notes>"},
    ]


def test_turn_only_injections_of_an_earlier_turn_are_stripped_and_persisted_ones_kept():
    earlier = [FenceInjection("quote", "old quote", {}, "t1"), FenceInjection("memory", "kept", {}, "t1")]

    contents = [m["content"] for m in assemble(earlier, turn="t2").messages]

    assert "<memory>\nkept\n</memory>" in contents
    assert not any("old quote" in c for c in contents)
    assert [i.kind for i in context.injections_to_persist(earlier, REGISTRY)] == ["memory"]


def test_over_budget_history_goes_first_then_fences_that_are_not_must_keep():
    injections = [FenceInjection("memory", "m " * 40, {}, "t2"), FenceInjection("notes", "n " * 40, {}, "t2")]

    assembled = assemble(injections, budget_tokens=60)

    contents = [m["content"] for m in assembled.messages]
    assert assembled.dropped_history == 2
    assert assembled.dropped_fences == ["notes"]
    assert contents[0] == "sys"
    assert contents[1].startswith("<memory>")
    assert contents[-1] == "now"


def test_a_fence_longer_than_its_budget_fraction_is_cut_with_a_marker():
    assembled = assemble([FenceInjection("quote", "x" * 4000, {}, "t2")], budget_tokens=1000)

    quote = next(m["content"] for m in assembled.messages if m["content"].startswith("<quote"))
    assert "characters omitted]" in quote
    assert budget.estimate_text_tokens(quote) <= 110
    assert assembled.truncated_fences == ["quote"]


def test_the_checkpoint_keeps_only_persisted_fences_of_known_kinds():
    state = history.Checkpoint(
        cursor="9",
        fences=[
            FenceInjection(context.SUMMARY, "s", {}, "r1"),
            FenceInjection(context.KNOWLEDGE, "k", {}, "r1"),
        ],
    ).to_state()
    state["fences"].append({"kind": "unknown-kind", "content": "x"})

    loaded = history.Checkpoint.from_state(state)

    assert [f.kind for f in loaded.fences] == [context.SUMMARY]
    assert loaded.summary == "s"
    assert history.Checkpoint.from_state({"cursor": ""}) is None


# --- compaction trigger -------------------------------------------------------------------------------

ROLES = ["user", "assistant"] * 4


def test_no_compaction_while_the_history_fits_and_the_rounds_are_within_max_round():
    assert history.compaction_split([10] * 8, ROLES, budget=100, keep_recent_tokens=30, max_round=4) == 0


def test_over_budget_the_tail_within_keep_recent_stays_starting_at_a_user_message():
    # The newest 3 messages fit 30 tokens, but the tail must start at a user message: keep 2.
    assert history.compaction_split([10] * 8, ROLES, budget=50, keep_recent_tokens=30, max_round=0) == 6


def test_more_rounds_than_max_round_compacts_even_within_budget():
    assert history.compaction_split([10] * 8, ROLES, budget=1000, keep_recent_tokens=1000, max_round=3) == 2


# --- truncation and tokens ----------------------------------------------------------------------------


def test_a_tool_result_over_the_limit_is_cut_with_a_marker_naming_what_was_left_out():
    assert tools.result_truncate("abcdef", 10) == "abcdef"
    assert tools.result_truncate("a" * 30, 10) == "a" * 10 + "\n[… tool result truncated: 20 of 30 characters omitted]"


def test_tool_arguments_that_are_not_a_json_object_are_an_error():
    assert tools.arguments_parse('{"a": 1}') == ({"a": 1}, None)
    assert tools.arguments_parse("")[1] is None
    assert tools.arguments_parse("[1]")[1] == "the arguments must be a JSON object"
    assert "not valid JSON" in tools.arguments_parse("{oops")[1]


def test_the_local_estimate_counts_cjk_characters_one_by_one():
    assert budget.estimate_text_tokens("abcdefgh") == 2
    assert budget.estimate_text_tokens("你好世界") == 4
    assert budget.estimate_message_tokens({"role": "user", "content": [{"type": "image_url"}]}) == 4 + 765
