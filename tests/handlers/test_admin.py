"""Operators browse the proxy call audit and approve pending platform actions in admin."""

from __future__ import annotations

import pytest
from django.urls import reverse

from runners.models import PlatformActionRequest, ProxyCallAudit
from transcripts.models import TranscriptItem

pytestmark = pytest.mark.django_db(transaction=True)


def test_audit_is_browsable_and_filterable_by_outcome_and_run(host_run, admin_client):
    run = host_run()
    run.call("state_set", scope="conversation", key="k", value=1)
    run.refused("storage_get", area="workspace", key="k")
    url = reverse("admin:runners_proxycallaudit_changelist")
    everything = admin_client.get(url)
    refused = admin_client.get(url, {"outcome": "unauthorized", "run_id": str(run.run.run_id)})
    assert everything.status_code == refused.status_code == 200
    assert {row.action for row in everything.context["cl"].result_list} == {"state_set", "storage_get"}
    assert [row.action for row in refused.context["cl"].result_list] == ["storage_get"]
    assert ProxyCallAudit.objects.count() == 2


def test_operator_approval_in_admin_executes_a_pending_action(host_run, admin_client):
    run = host_run(resource_policy={"platform_actions": ["message.send"]})
    pending = run.refused("platform_request_action", action="message.send", payload={"text": "from approval"})
    request_id = pending.error.details["request_id"]
    response = admin_client.post(
        reverse("admin:runners_platformactionrequest_changelist"),
        {"action": "approve", "_selected_action": [request_id]},
    )
    assert response.status_code == 302
    assert PlatformActionRequest.objects.get(pk=request_id).status == PlatformActionRequest.Status.EXECUTED
    assert TranscriptItem.objects.filter(content="from approval").count() == 1
