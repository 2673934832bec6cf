"""Which bindings handle an event: most specific scope, then priority; ties are conflicts; observers
run beside the replying binding."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bindings.models import AgentBinding, Workspace
from bindings.selectors import SCOPE_SPECIFICITY, binding_resolve_for_event, bindings_choose, event_type_matches
from tests.factories import AgentBindingFactory, WorkspaceFactory


def resolve(workspace, bot_id="helpdesk", event_type="message.received"):
    return binding_resolve_for_event(workspace=workspace, event_type=event_type, bot_id=bot_id)


@pytest.mark.django_db
def test_a_bot_binding_beats_a_workspace_binding_with_higher_priority(workspace):
    AgentBindingFactory.create(workspace=workspace, binding_id="ws", priority=100)
    AgentBindingFactory.create(workspace=workspace, binding_id="bot", scope_type="bot", scope_id="helpdesk")

    assert resolve(workspace).replying.binding_id == "bot"


@pytest.mark.django_db
def test_a_workspace_binding_beats_a_global_one(workspace):
    AgentBindingFactory.create(workspace=None, binding_id="global", scope_type="global", scope_id="", priority=9)
    AgentBindingFactory.create(workspace=workspace, binding_id="ws")

    assert resolve(workspace).replying.binding_id == "ws"


@pytest.mark.django_db
def test_global_bindings_apply_to_every_workspace():
    AgentBindingFactory.create(workspace=None, binding_id="global", scope_type="global", scope_id="")

    assert resolve(WorkspaceFactory.create()).replying.binding_id == "global"
    assert resolve(WorkspaceFactory.create()).replying.binding_id == "global"


@pytest.mark.django_db
def test_within_a_scope_the_highest_priority_replies(workspace):
    AgentBindingFactory.create(workspace=workspace, binding_id="low", priority=1)
    AgentBindingFactory.create(workspace=workspace, binding_id="high", priority=2)

    assert resolve(workspace).replying.binding_id == "high"


@pytest.mark.django_db
def test_a_tie_at_the_top_is_a_conflict_and_nothing_runs(workspace):
    AgentBindingFactory.create(workspace=workspace, binding_id="a")
    AgentBindingFactory.create(workspace=workspace, binding_id="b")
    AgentBindingFactory.create(workspace=workspace, binding_id="watcher", delivery_policy={"enable_reply": False})

    resolution = resolve(workspace)

    assert resolution.conflict == ["a", "b"]
    assert resolution.replying is None
    assert resolution.observers == []
    assert resolution.to_run == []


@pytest.mark.django_db
def test_observers_run_beside_the_replying_binding(workspace):
    AgentBindingFactory.create(workspace=workspace, binding_id="answer")
    AgentBindingFactory.create(workspace=workspace, binding_id="audit", delivery_policy={"enable_reply": False})
    AgentBindingFactory.create(workspace=workspace, binding_id="audit2", delivery_policy={"enable_reply": False})

    resolution = resolve(workspace)

    assert resolution.replying.binding_id == "answer"
    assert [b.binding_id for b in resolution.observers] == ["audit", "audit2"]
    assert [b.binding_id for b in resolution.to_run] == ["answer", "audit", "audit2"]


@pytest.mark.django_db
def test_observers_run_even_without_a_replying_binding(workspace):
    AgentBindingFactory.create(workspace=workspace, binding_id="audit", delivery_policy={"enable_reply": False})

    resolution = resolve(workspace)

    assert resolution.replying is None
    assert [b.binding_id for b in resolution.observers] == ["audit"]


@pytest.mark.django_db
def test_disabled_other_bot_other_event_and_other_workspace_bindings_do_not_run(workspace):
    AgentBindingFactory.create(workspace=workspace, binding_id="off", enabled=False, priority=5)
    AgentBindingFactory.create(workspace=workspace, binding_id="other-bot", scope_type="bot", scope_id="sales")
    AgentBindingFactory.create(
        workspace=workspace, binding_id="other-event", event_types=["message.edited"], priority=5
    )
    AgentBindingFactory.create(workspace=WorkspaceFactory.create(), binding_id="foreign", priority=5)
    AgentBindingFactory.create(workspace=workspace, binding_id="fallback")

    resolution = resolve(workspace)

    assert resolution.replying.binding_id == "fallback"
    assert resolution.observers == []


@pytest.mark.django_db
def test_bot_scoped_bindings_do_not_match_events_without_a_bot(workspace):
    AgentBindingFactory.create(workspace=workspace, binding_id="bot", scope_type="bot", scope_id="helpdesk")

    assert resolve(workspace, bot_id=None).replying is None


@pytest.mark.django_db
def test_wildcard_event_types_match(workspace):
    AgentBindingFactory.create(workspace=workspace, binding_id="all", event_types=["*"])
    AgentBindingFactory.create(workspace=workspace, binding_id="family", event_types=["message.*"], priority=1)

    assert resolve(workspace, event_type="message.received").replying.binding_id == "family"
    assert resolve(workspace, event_type="schedule.tick").replying.binding_id == "all"


@pytest.mark.parametrize(
    ("pattern", "event_type", "expected"),
    [
        ("*", "anything.at.all", True),
        ("message.received", "message.received", True),
        ("message.received", "message.receivedx", False),
        ("message.*", "message.received", True),
        ("message.*", "messages.received", False),
        ("message.*", "message", False),
    ],
)
def test_event_type_patterns(pattern, event_type, expected):
    assert event_type_matches(pattern, event_type) is expected


# --- properties over random sets of bindings (no database: the rules are a pure function) ---------------

WORKSPACE = Workspace(pk=1, slug="home")
OTHER_WORKSPACE_ID = 2
BOTS = ["alpha", "beta"]
EVENTS = ["message.received", "message.edited"]


@st.composite
def a_binding(draw, index: int) -> AgentBinding:
    scope_type = draw(st.sampled_from(["global", "workspace", "bot"]))
    owner = None if scope_type == "global" else draw(st.sampled_from([WORKSPACE.pk, WORKSPACE.pk, OTHER_WORKSPACE_ID]))
    return AgentBinding(
        pk=index + 1,
        binding_id=f"b{index}",
        workspace_id=owner,
        scope_type=scope_type,
        scope_id={"global": "", "workspace": "home", "bot": draw(st.sampled_from(BOTS))}[scope_type],
        event_types=draw(st.lists(st.sampled_from([*EVENTS, "*", "message.*"]), min_size=1, max_size=2)),
        priority=draw(st.integers(min_value=-2, max_value=2)),
        enabled=draw(st.booleans()),
        delivery_policy={"enable_reply": draw(st.booleans())},
    )


@st.composite
def binding_sets(draw) -> list[AgentBinding]:
    size = draw(st.integers(min_value=0, max_value=8))
    return [draw(a_binding(i)) for i in range(size)]


def _eligible(binding: AgentBinding, event_type: str, bot_id: str | None) -> bool:
    if not binding.enabled or not any(event_type_matches(p, event_type) for p in binding.event_types):
        return False
    if binding.scope_type == "global":
        return True
    if binding.workspace_id != WORKSPACE.pk:
        return False
    return binding.scope_type == "workspace" or binding.scope_id == bot_id


@settings(max_examples=300, deadline=None)
@given(bindings=binding_sets(), event_type=st.sampled_from(EVENTS), bot_id=st.sampled_from([*BOTS, None]))
def test_resolution_rules_hold_for_any_set_of_bindings(bindings, event_type, bot_id):
    resolution = bindings_choose(bindings, workspace=WORKSPACE, event_type=event_type, bot_id=bot_id)

    eligible = [b for b in bindings if _eligible(b, event_type, bot_id)]
    repliers = [b for b in eligible if b.replies]

    # nothing ineligible ever runs
    assert all(_eligible(b, event_type, bot_id) for b in resolution.to_run)
    # the replying binding is never less specific or lower priority than another matching replier
    if resolution.replying is not None:
        chosen = (SCOPE_SPECIFICITY[resolution.replying.scope_type], resolution.replying.priority)
        for other in repliers:
            if other is not resolution.replying:
                assert (SCOPE_SPECIFICITY[other.scope_type], other.priority) < chosen
        assert {b.pk for b in resolution.observers} == {b.pk for b in eligible if not b.replies}
    elif resolution.conflict:
        assert len(resolution.conflict) >= 2
        assert resolution.to_run == []
    else:
        assert repliers == []
    # a conflict happens exactly when the best level is shared
    if repliers:
        best = max((SCOPE_SPECIFICITY[b.scope_type], b.priority) for b in repliers)
        tied = [b for b in repliers if (SCOPE_SPECIFICITY[b.scope_type], b.priority) == best]
        assert bool(resolution.conflict) == (len(tied) > 1)


@settings(max_examples=200, deadline=None)
@given(bindings=binding_sets(), seed=st.integers(), event_type=st.sampled_from(EVENTS))
def test_resolution_does_not_depend_on_creation_order(bindings, seed, event_type):
    shuffled = list(bindings)
    random.Random(seed).shuffle(shuffled)

    first = bindings_choose(bindings, workspace=WORKSPACE, event_type=event_type, bot_id="alpha")
    second = bindings_choose(shuffled, workspace=WORKSPACE, event_type=event_type, bot_id="alpha")

    assert (first.replying and first.replying.pk) == (second.replying and second.replying.pk)
    assert [b.pk for b in first.observers] == [b.pk for b in second.observers]
    assert first.conflict == second.conflict
