"""Every field of the run context a runner relies on, as the real worker builds it and the real plugin runtime
hands it to the qa-runner (`qa:echo_context` replies the context it got as JSON), with the runner's manifest
declaring the capability or context policy under test (docs/context-and-results.md)."""

from __future__ import annotations

import hashlib
import json
import uuid
from typing import Any

import pytest
from django.db import transaction

from bindings.models import RunnerDescriptor
from runners.access.scope import RunScope
from runners.lifecycle.api import run_out
from runners.lifecycle.services import run_create
from tests.processes import QA_RUNNER_ID, post_message, wait_terminal
from transcripts.models import EventLog, StateEntry, TranscriptItem

pytestmark = pytest.mark.django_db(transaction=True)


def _manifest(*, context: dict[str, Any] | None = None, capabilities: dict[str, Any] | None = None) -> None:
    """Change what the qa-runner's manifest declares (the next `qa_binding()` syncs it back)."""
    descriptor = RunnerDescriptor.objects.get(runner_id=QA_RUNNER_ID)
    manifest = json.loads(json.dumps(descriptor.manifest))
    manifest["context"] = {**manifest.get("context", {}), **(context or {})}
    manifest["capabilities"] = {**manifest.get("capabilities", {}), **(capabilities or {})}
    digest = hashlib.sha256(json.dumps(manifest, sort_keys=True).encode()).hexdigest()
    RunnerDescriptor.objects.filter(pk=descriptor.pk).update(manifest=manifest, manifest_sha256=digest)


def _history(binding: Any, conversation_id: str, count: int) -> None:
    TranscriptItem.objects.bulk_create(
        TranscriptItem(
            workspace=binding.workspace, conversation_id=conversation_id,
            role="user" if i % 2 == 0 else "assistant", content=f"earlier message {i}",
        )
        for i in range(count)
    )  # fmt: skip


def _echo(binding: Any, *, conversation_id: str = "ctx-1", **event: Any) -> tuple[dict[str, Any], Any]:
    """The context the qa-runner got for one message event (`event` overrides the event's fields)."""
    text = "qa:echo_context hello"
    with transaction.atomic():
        row = EventLog.objects.create(
            workspace=binding.workspace, event_id=f"evt-{uuid.uuid4().hex[:10]}", event_type="message.received",
            source="api", conversation_id=conversation_id,
            actor=event.pop("actor", {"actor_type": "user", "actor_id": "u-7"}),
            input=event.pop("input", {"text": text}), input_summary=text, **event,
        )  # fmt: skip
        TranscriptItem.objects.create(
            workspace=binding.workspace, conversation_id=conversation_id, role="user", content=text, event=row
        )
        run = run_create(event=row, binding=binding, observer=False)
    finished = wait_terminal(run, timeout=60)
    assert finished.status == "completed", finished.error
    return json.loads(finished.output), finished


def test_a_private_message_names_the_sender_as_launcher_person(worker, qa_binding):
    ctx, _ = _echo(qa_binding(), data={"chat_id": "u-7", "chat_type": "private"})
    assert (ctx["conversation"]["launcher_type"], ctx["conversation"]["launcher_id"]) == ("person", "u-7")


def test_a_group_message_names_the_group_as_launcher(worker, qa_binding):
    ctx, _ = _echo(qa_binding(), data={"chat_id": "-10042", "chat_type": "supergroup"})
    assert (ctx["conversation"]["launcher_type"], ctx["conversation"]["launcher_id"]) == ("group", "-10042")


def test_runtime_names_the_host_version_the_locale_and_whether_the_surface_streams(worker, qa_binding):
    ctx, _ = _echo(qa_binding())
    runtime = ctx["runtime"]
    assert runtime["langbot_version"].startswith("langbot-host/")
    assert runtime["locale"] == "en_US"
    assert runtime["metadata"]["streaming_supported"] is True
    assert ctx["delivery"]["supports_streaming"] is True

    chinese, _ = _echo(qa_binding(), data={"locale": "zh-hans"})
    assert chinese["runtime"]["locale"] == "zh_Hans"

    quiet, _ = _echo(qa_binding(delivery_policy={"enable_streaming": False}))
    assert quiet["runtime"]["metadata"]["streaming_supported"] is False


def test_static_refs_come_only_to_a_runner_that_wants_them(worker, qa_binding):
    binding = qa_binding()
    ctx, _ = _echo(binding)
    assert ctx["runtime"]["static_refs"] == {}

    _manifest(context={"wants_static_context_refs": True})
    first, _ = _echo(binding)
    second, _ = _echo(binding)
    refs = first["runtime"]["static_refs"]
    assert set(refs) == {"runner_manifest", "binding_config", "resources", "tool_schemas"}
    assert all(ref["hash"].startswith("sha256:") and ref["size"] > 0 for ref in refs.values())
    # Unchanged from run to run while nothing static changed: a runner may keep its cached prefix.
    assert second["runtime"]["static_refs"] == refs


def test_bootstrap_none_is_reported_as_none(worker, qa_binding):
    binding = qa_binding()
    _history(binding, "ctx-none", 3)
    _manifest(context={"bootstrap": "none", "max_inline_events": 10, "max_inline_bytes": 10000})
    ctx, _ = _echo(binding, conversation_id="ctx-none")
    assert ctx["context"]["inline_policy"]["mode"] == "none"
    assert ctx["bootstrap"] is None


def test_the_default_current_event_is_reported_as_such(worker, qa_binding):
    binding = qa_binding()
    _history(binding, "ctx-current", 3)
    ctx, _ = _echo(binding, conversation_id="ctx-current")
    assert ctx["context"]["inline_policy"]["mode"] == "current_event"
    assert ctx["context"]["has_history_before"] is True


def test_a_recent_tail_counts_the_history_it_comes_from(worker, qa_binding):
    binding = qa_binding()
    _history(binding, "ctx-tail", 7)
    _manifest(context={"bootstrap": "recent_tail", "max_inline_events": 3, "max_inline_bytes": 10000})
    ctx, _ = _echo(binding, conversation_id="ctx-tail")
    inline = ctx["context"]["inline_policy"]
    assert (inline["mode"], inline["delivered_count"], inline["source_total_count"]) == ("recent_tail", 3, 7)
    assert inline["messages_complete"] is False
    assert [m["content"] for m in ctx["bootstrap"]["messages"]] == [f"earlier message {i}" for i in (4, 5, 6)]


def test_hybrid_ownership_gets_a_tail_and_is_told_to_pull_the_rest(worker, qa_binding):
    binding = qa_binding()
    _history(binding, "ctx-hybrid", 5)
    _manifest(context={"ownership": "hybrid", "max_inline_events": 2, "max_inline_bytes": 10000})
    ctx, _ = _echo(binding, conversation_id="ctx-hybrid")
    inline = ctx["context"]["inline_policy"]
    assert (inline["mode"], inline["delivered_count"], inline["source_total_count"]) == ("recent_tail", 2, 5)
    assert "hybrid" in inline["reason"]
    assert ctx["context"]["available_apis"]["history_page"] is True
    oldest = ctx["bootstrap"]["metadata"]["oldest_cursor"]
    assert TranscriptItem.objects.get(pk=int(oldest)).content == "earlier message 3"


def test_summary_tail_of_a_host_compacted_runner_carries_the_hosts_digest(worker, qa_binding):
    binding = qa_binding()
    _history(binding, "ctx-digest", 6)
    _manifest(
        context={
            "bootstrap": "summary_tail", "owns_compaction": False, "max_inline_events": 2, "max_inline_bytes": 10000,
        }
    )  # fmt: skip
    ctx, _ = _echo(binding, conversation_id="ctx-digest")
    assert ctx["context"]["inline_policy"]["mode"] == "summary_tail"
    summary = ctx["bootstrap"]["summary"]
    assert summary.startswith("Earlier in this conversation (4 earlier items")
    assert "user: earlier message 0" in summary
    assert "assistant: earlier message 3" in summary
    assert "earlier message 4" not in summary  # in the tail, not the summary
    assert ctx["bootstrap"]["metadata"]["summary_source"] == "host_digest"


def test_summary_tail_of_a_runner_that_owns_compaction_carries_its_own_checkpoint(worker, qa_binding):
    binding = qa_binding()
    _history(binding, "ctx-ckpt", 4)
    _manifest(context={"bootstrap": "summary_tail", "max_inline_events": 2, "max_inline_bytes": 10000})

    before, _ = _echo(binding, conversation_id="ctx-ckpt")
    assert before["context"]["inline_policy"]["mode"] == "recent_tail"
    assert "no summary yet" in before["context"]["inline_policy"]["reason"]

    scope = RunScope(
        workspace_id=binding.workspace_id, workspace=binding.workspace.slug, runner_id=QA_RUNNER_ID,
        binding_id=binding.binding_id, conversation_id="ctx-ckpt",
    )  # fmt: skip
    StateEntry.objects.create(
        workspace=binding.workspace, scope="conversation", key="summary.checkpoint",
        value="The user is planning a trip to Kyoto.", scope_key=scope.state_key("conversation") or "",
    )  # fmt: skip
    after, _ = _echo(binding, conversation_id="ctx-ckpt")
    assert after["context"]["inline_policy"]["mode"] == "summary_tail"
    assert after["bootstrap"]["summary"] == "The user is planning a trip to Kyoto."
    assert after["bootstrap"]["metadata"]["summary_source"] == "runner_checkpoint"


def _parts(ctx: dict[str, Any]) -> list[dict[str, Any]]:
    return [{k: v for k, v in part.items() if v is not None} for part in ctx["input"]["contents"]]


def test_a_text_only_runner_gets_a_note_for_an_image_instead_of_the_image(worker, qa_binding):
    image = {"type": "image_url", "image_url": "https://example.com/cat.png", "mime_type": "image/png"}
    ctx, run = _echo(qa_binding(), input={"text": "qa:echo_context what is this?", "contents": [image]})
    assert run.status == "completed"
    assert _parts(ctx) == [{"type": "text", "text": "[image (image/png): not shown, this agent reads text only]"}]
    assert ctx["input"]["text"].endswith("\n[image (image/png): not shown, this agent reads text only]")


def test_a_multimodal_runner_gets_the_image(worker, qa_binding):
    binding = qa_binding()
    _manifest(capabilities={"multimodal_input": True})
    image = {"type": "image_url", "image_url": "https://example.com/cat.png"}
    ctx, _ = _echo(binding, input={"text": "qa:echo_context what is this?", "contents": [image]})
    assert _parts(ctx) == [image]
    assert ctx["input"]["text"] == "qa:echo_context what is this?"


def test_a_runner_that_does_not_stream_is_shown_as_such_on_its_run(worker, qa_binding):
    binding = qa_binding()
    _, streaming = _echo(binding)
    assert run_out(streaming)["streaming"] is True
    _manifest(capabilities={"streaming": False})
    _, whole = _echo(binding)
    assert run_out(whole)["streaming"] is False


@pytest.mark.parametrize(
    ("flag", "api", "call"),
    [
        ("supports_history_pull", "history_page", ("history_page", {"limit": 5})),
        ("supports_artifact_pull", "artifact_metadata", ("artifact_metadata", {"artifact_id": str(uuid.uuid4())})),
    ],
)
def test_a_runner_that_does_not_pull_gets_no_pull_api(worker, qa_binding, probe, flag, api, call):
    binding = qa_binding()
    _manifest(context={flag: False})
    ctx, _ = _echo(binding)
    assert ctx["context"]["available_apis"][api] is False
    _manifest(context={flag: False})  # the probe's run reads the same manifest
    report = probe({"pull": call}, binding=binding)
    assert report["pull"]["code"] == "unauthorized"


def test_post_message_runs_still_echo(worker, qa_binding):
    # The shared helper's events (no chat data) name the actor as the launcher.
    run = wait_terminal(post_message(qa_binding(), "qa:echo_context x", actor_id="u-9"))
    ctx = json.loads(run.output)
    assert (ctx["conversation"]["launcher_type"], ctx["conversation"]["launcher_id"]) == ("person", "u-9")
