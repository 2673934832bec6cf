"""The runner a LangBot developer starts from — `lbp init` plus `lbp comp Runner` from LangBot's released SDK,
not edited — mounted by LangBot's own runtime (`lbp rt`) and used as a user of this host would: the runner
list refreshed over REST, the runner listed, a binding made over REST and a message answered on
`POST /api/v1/events?wait=`. The plugin is generated when the package's runtime starts (see conftest).
"""

from __future__ import annotations

import time

import httpx
import pytest

from tests.langbot_plugin.conftest import TEMPLATE_ID

pytestmark = [pytest.mark.integration, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def test_the_sdks_template_runner_unchanged_is_listed_bound_and_answers_over_rest(langbot_worker, start_langbot_web):
    from bindings.services import api_key_create
    from tests.factories import WorkspaceFactory

    web = start_langbot_web()
    workspace = WorkspaceFactory.create()
    _, key = api_key_create(workspace=workspace, is_operator=True)
    with httpx.Client(base_url=web.url, headers={"Authorization": f"Bearer {key}"}, timeout=60) as api:
        # The runtime starts its plugins once the worker has connected: the first refreshes may come before.
        deadline = time.monotonic() + 60
        while True:
            refreshed = api.post("/api/v1/runners/refresh")
            assert refreshed.status_code == 200, refreshed.text
            if TEMPLATE_ID in {runner["runner_id"] for runner in refreshed.json()["items"]}:
                break
            assert time.monotonic() < deadline, refreshed.json()
            time.sleep(1)
        # The template imports and mounts as generated: nothing about it in the refresh's problems.
        assert not [e for e in refreshed.json()["plugin_errors"] if "lbp-template" in str(e)], refreshed.json()

        listed = api.get("/api/v1/runners")
        assert listed.status_code == 200, listed.text
        [runner] = [item for item in listed.json()["items"] if item["runner_id"] == TEMPLATE_ID]
        assert runner["status"] == "available", runner

        created = api.post(
            "/api/v1/bindings",
            json={
                "binding_id": "lbp-template",
                "name": "LangBot SDK template",
                "scope": {"scope_type": "workspace"},
                "event_types": ["message.received"],
                "runner_id": TEMPLATE_ID,
            },
        )
        assert created.status_code == 201, created.text
        answered = api.post("/api/v1/events?wait=30", json={"conversation_id": "template-1", "input": {"text": "ping"}})
    assert answered.status_code == 200, answered.text
    [run] = answered.json()["runs"]
    # The template's runner answers "Received: <the user's text>".
    assert (run["status"], run["output"]) == ("completed", "Received: ping"), run
