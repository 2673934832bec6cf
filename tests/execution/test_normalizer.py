"""The result normalizer's rules: what is kept, dropped or ignored, delta coalescing and final status."""

from __future__ import annotations

from langbot_sdk.protocol import AgentRunResult, limits
from runners.orchestrator.execution import host_failure
from runners.orchestrator.normalizer import ResultNormalizer, delta_merge, message_of, outcome_of


def _wire(result: AgentRunResult, sequence: int | None = None) -> dict:
    data = result.model_dump(mode="json", exclude_none=True)
    if sequence is not None:
        data["sequence"] = sequence
    return data


def test_valid_results_are_accepted_with_the_runners_data():
    normalizer = ResultNormalizer("r1")
    accepted = normalizer.accept(_wire(AgentRunResult.message_completed("r1", "hi"), 1))
    assert accepted is not None
    assert accepted.type == "message.completed"
    assert accepted.data == {"message": {"role": "assistant", "content": "hi"}}


def test_a_repeated_sequence_is_dropped_as_a_duplicate():
    normalizer = ResultNormalizer("r1")
    result = _wire(AgentRunResult.message_delta("r1", "a"), 1)
    assert normalizer.accept(result) is not None
    assert normalizer.accept(dict(result)) is None
    assert normalizer.dropped == 1
    assert normalizer.accept(_wire(AgentRunResult.message_delta("r1", "b"), 2)) is not None


def test_an_oversize_result_is_dropped():
    normalizer = ResultNormalizer("r1")
    big = _wire(AgentRunResult.message_completed("r1", "x" * (limits.RESULT_EVENT_MAX_BYTES + 1)), 1)
    assert normalizer.accept(big) is None
    assert normalizer.dropped == 1


def test_an_unknown_type_is_ignored_not_dropped():
    normalizer = ResultNormalizer("r1")
    assert normalizer.accept({"type": "custom.thing", "data": {"x": 1}, "sequence": 1}) is None
    assert (normalizer.ignored, normalizer.dropped) == (1, 0)


def test_a_known_type_with_an_invalid_payload_is_dropped():
    normalizer = ResultNormalizer("r1")
    assert normalizer.accept({"type": "message.completed", "data": {"message": 42}}) is None
    assert normalizer.accept({"type": "state.updated", "data": {"scope": "galaxy", "key": "k", "value": 1}}) is None
    assert normalizer.accept("not a result") is None
    assert normalizer.dropped == 3


def test_text_deltas_of_one_role_merge_and_others_do_not():
    a = {"chunk": {"role": "assistant", "content": "hel"}}
    b = {"chunk": {"role": "assistant", "content": "lo"}}
    assert delta_merge(a, b) == {"chunk": {"role": "assistant", "content": "hello"}}
    assert delta_merge(a, {"chunk": {"role": "tool", "content": "x"}}) is None
    assert delta_merge(a, {"chunk": {"role": "assistant", "content": [{"type": "text", "text": "x"}]}}) is None


def test_terminal_results_map_to_run_statuses():
    normalizer = ResultNormalizer("r1")
    completed = normalizer.accept(_wire(AgentRunResult.run_completed("r1", usage={"total_tokens": 3})))
    assert completed is not None
    outcome = outcome_of(completed, cancel_reason=None)
    assert (outcome.status, outcome.usage) == ("completed", {"total_tokens": 3})

    assert outcome_of(host_failure("runner.timeout", "late"), cancel_reason=None).status == "timeout"
    cancelled = outcome_of(host_failure("cancelled", "stop", reason="runner's"), cancel_reason="user pressed stop")
    assert (cancelled.status, cancelled.status_reason) == ("cancelled", "user pressed stop")
    assert outcome_of(host_failure("cancelled", "stop", reason="runner's"), cancel_reason=None).status_reason == (
        "runner's"
    )
    failed = outcome_of(host_failure("worker_shutdown", "bye", retryable=True), cancel_reason=None)
    assert (failed.status, failed.status_reason) == ("failed", "worker_shutdown")
    assert failed.error is not None
    assert failed.error["retryable"] is True


def test_text_the_database_cannot_store_is_kept_with_replacement_characters():
    normalizer = ResultNormalizer("r1")
    nul = normalizer.accept(_wire(AgentRunResult.message_completed("r1", "a\x00b"), 1))
    lone = normalizer.accept({"type": "message.delta", "data": {"chunk": {"content": "c\ud800d"}}, "sequence": 2})
    literal = normalizer.accept(_wire(AgentRunResult.message_delta("r1", "\\u0000 as typed"), 3))

    assert nul is not None
    assert lone is not None
    assert literal is not None
    assert nul.data["message"]["content"] == "a\ufffdb"
    assert message_of(nul) == ("a\ufffdb", [])
    assert lone.data["chunk"]["content"] == "c\ufffdd"
    assert literal.data["chunk"]["content"] == "\\u0000 as typed"
    assert normalizer.dropped == 0
