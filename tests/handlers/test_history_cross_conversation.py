"""Cross-conversation history reads by the binding's grant (docs/host-apis.md, "History"): a run reads
another conversation of its workspace only when its binding lists it (or `*`), or grants the
conversations its actor took part in; otherwise `not_found`. Every read names its conversation in the
proxy-call audit. Nothing of another workspace is ever read, whatever the grant."""

from __future__ import annotations

import pytest

from runners.models import ProxyCallAudit
from tests.factories import WorkspaceFactory
from tests.handlers.conftest import post_event
from transcripts.models import EventLog

pytestmark = pytest.mark.django_db(transaction=True)


def _texts(page: dict) -> list[str]:
    return [item["content"] for item in page["items"]]


def _audit(run) -> list[tuple[str, str, str]]:
    rows = ProxyCallAudit.objects.filter(run_id=str(run.run.run_id)).order_by("id")
    return [(row.action, row.resource, row.outcome) for row in rows]


def _spoken_by(workspace, conversation_id: str, text: str, actor_id: str) -> None:
    event, item = post_event(workspace, conversation_id, text)
    actor = {"actor_type": "user", "actor_id": actor_id}
    EventLog.objects.filter(pk=event.pk).update(actor=actor)
    type(item).objects.filter(pk=item.pk).update(actor=actor)


def test_a_listed_conversation_can_be_paged_and_searched(host_run):
    run = host_run(conversation_id="mine", resource_policy={"history_conversations": ["support-42"]})
    post_event(run.workspace, "support-42", "the invoice number is 1234")

    assert run.built.context.resources.history.cross_conversation is True
    page = run.call("history_page", conversation_id="support-42")
    found = run.call("history_search", query="invoice", filters={"conversation_id": "support-42"})

    assert _texts(page) == ["the invoice number is 1234"]
    assert [hit["item"]["content"] for hit in found["items"]] == ["the invoice number is 1234"]
    assert _audit(run) == [
        ("history_page", "conversation_id=support-42", "ok"),
        ("history_search", "conversation_id=support-42", "ok"),
    ]


def test_a_conversation_the_binding_does_not_grant_is_not_found_and_audited(host_run):
    run = host_run(conversation_id="mine", resource_policy={"history_conversations": ["support-42"]})
    post_event(run.workspace, "support-43", "someone else's secret")
    ungranted = host_run(workspace=run.workspace, conversation_id="mine")

    assert run.refused("history_page", conversation_id="support-43").code == "not_found"
    refused = run.refused("history_search", query="secret", filters={"conversation_id": "support-43"})
    assert refused.code == "not_found"
    # Without any grant the run reads its own conversation only, as before.
    assert ungranted.built.context.resources.history.cross_conversation is False
    assert ungranted.refused("history_page", conversation_id="support-42").code == "not_found"
    assert _audit(run) == [
        ("history_page", "conversation_id=support-43", "not_found"),
        ("history_search", "conversation_id=support-43", "not_found"),
    ]


def test_the_same_actor_grant_opens_only_conversations_the_actor_took_part_in(host_run):
    # The run's event is sent by user u1 (tests.handlers.conftest.post_event).
    run = host_run(conversation_id="mine", resource_policy={"history_same_actor": True})
    _spoken_by(run.workspace, "with-u1", "u1 asked about refunds", "u1")
    _spoken_by(run.workspace, "with-u2", "u2 asked about passwords", "u2")

    assert _texts(run.call("history_page", conversation_id="with-u1")) == ["u1 asked about refunds"]
    assert run.refused("history_page", conversation_id="with-u2").code == "not_found"


def test_another_workspaces_conversation_is_never_readable(host_run):
    other = WorkspaceFactory.create()
    _spoken_by(other, "shared-name", "the other tenant's secret", "u1")
    run = host_run(
        conversation_id="mine",
        resource_policy={"history_conversations": ["*"], "history_same_actor": True},
    )
    same_actor_only = host_run(
        workspace=run.workspace, conversation_id="mine", resource_policy={"history_same_actor": True}
    )

    # Even `*` reaches only conversations of the run's own workspace: the other tenant's rows never show.
    page = run.call("history_page", conversation_id="shared-name")
    assert "the other tenant's secret" not in _texts(page)
    found = run.call("history_search", query="secret", filters={"conversation_id": "shared-name"})
    assert found["items"] == []
    # The actor spoke there, but in another workspace: no grant opens it.
    assert same_actor_only.refused("history_page", conversation_id="shared-name").code == "not_found"
