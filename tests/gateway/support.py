"""Helpers shared by the gateway, transcript and runs API tests (plain functions, not fixtures)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from bindings.models import AgentBinding, Workspace
from tests.factories import AgentBindingFactory


def post_event(client, body: Any, **query: Any):
    url = "/api/v1/events" + (f"?{urlencode(query)}" if query else "")
    return client.post(url, body, format="json")


def message(text: str = "hello", **fields: Any) -> dict[str, Any]:
    return {"input": {"text": text}, **fields}


def binding_for(workspace: Workspace, **fields: Any) -> AgentBinding:
    return AgentBindingFactory.create(workspace=workspace, **fields)


def field_errors_of(response) -> dict[str, str]:
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "invalid_argument", error
    return error["details"]["fields"]
