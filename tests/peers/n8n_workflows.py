"""The n8n workflows (and the one credential) the peers tests import into a real n8n, written here in n8n's
export format. Each starts with a Webhook trigger on its own path:

- `langbot-chat`: answers through "Respond to Webhook" with JSON `{"response": "echo: <chatInput> (session
  <sessionId>)"}`, so a reply shows the session id n8n was sent;
- `langbot-stream`: a streaming webhook whose "Respond to Webhook" returns the first incoming item, an
  "Edit Fields" node's `{"response": "echo: <chatInput>"}` (n8n streams it as the item's JSON text);
- `langbot-fail` / `langbot-fail-stream`: a Code node named "Refuse" throws (plain answer / streaming);
- `langbot-auth`: `langbot-chat` behind header authentication (`HEADER_NAME: HEADER_VALUE`).
"""

from __future__ import annotations

import itertools
import uuid
from typing import Any

HEADER_NAME = "X-N8N-Key"
HEADER_VALUE = "peers-header-secret-4242"
CREDENTIAL_ID = "langbotPeersHeader1"
WEBHOOK = "n8n-nodes-base.webhook"

ECHO_BODY = '={{ { "response": "echo: " + $json.body.chatInput + " (session " + $json.body.sessionId + ")" } }}'


def _webhook(path: str, response_mode: str, *, auth: bool = False) -> dict[str, Any]:
    node: dict[str, Any] = {
        "id": f"webhook-{path}",
        "name": "Webhook",
        "type": WEBHOOK,
        "typeVersion": 2.1,
        "position": [0, 0],
        "webhookId": str(uuid.uuid5(uuid.NAMESPACE_URL, f"langbot-peers/{path}")),
        "parameters": {"httpMethod": "POST", "path": path, "responseMode": response_mode, "options": {}},
    }
    if auth:
        node["parameters"]["authentication"] = "headerAuth"
        node["credentials"] = {"httpHeaderAuth": {"id": CREDENTIAL_ID, "name": "LangBot peers header"}}
    return node


def _respond(parameters: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "respond",
        "name": "Respond to Webhook",
        "type": "n8n-nodes-base.respondToWebhook",
        # 1.5 is the first version that streams when its webhook does; 1.4 answers nothing there.
        "typeVersion": 1.5,
        "position": [400, 0],
        "parameters": {**parameters, "options": {}},
    }


def _echo_fields() -> dict[str, Any]:
    assignment = {"id": "response", "name": "response", "value": "=echo: {{ $json.body.chatInput }}", "type": "string"}
    return {
        "id": "fields",
        "name": "Edit Fields",
        "type": "n8n-nodes-base.set",
        "typeVersion": 3.4,
        "position": [200, 0],
        "parameters": {"mode": "manual", "assignments": {"assignments": [assignment]}, "options": {}},
    }


def _refuse() -> dict[str, Any]:
    return {
        "id": "refuse",
        "name": "Refuse",
        "type": "n8n-nodes-base.code",
        "typeVersion": 2,
        "position": [200, 0],
        "parameters": {"jsCode": "throw new Error('refused by the workflow');"},
    }


def _chain(*nodes: dict[str, Any]) -> dict[str, Any]:
    return {
        left["name"]: {"main": [[{"node": right["name"], "type": "main", "index": 0}]]}
        for left, right in itertools.pairwise(nodes)
    }


def _workflow(workflow_id: str, name: str, *nodes: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": workflow_id,
        "name": name,
        "active": False,
        "nodes": list(nodes),
        "connections": _chain(*nodes),
        "settings": {"executionOrder": "v1"},
    }


def workflows() -> list[dict[str, Any]]:
    echo = _respond({"respondWith": "json", "responseBody": ECHO_BODY})
    return [
        _workflow("langbotChat00001", "LangBot chat", _webhook("langbot-chat", "responseNode"), echo),
        _workflow(
            "langbotStream001",
            "LangBot stream",
            _webhook("langbot-stream", "streaming"),
            _echo_fields(),
            _respond({"respondWith": "firstIncomingItem"}),
        ),
        _workflow("langbotFail00001", "LangBot failing", _webhook("langbot-fail", "lastNode"), _refuse()),
        _workflow(
            "langbotFailStrm1", "LangBot failing stream", _webhook("langbot-fail-stream", "streaming"), _refuse()
        ),
        _workflow("langbotAuth00001", "LangBot header auth", _webhook("langbot-auth", "responseNode", auth=True), echo),
    ]


def credentials() -> list[dict[str, Any]]:
    # Imported unencrypted: n8n's import encrypts a credential's `data` object with the instance's key.
    return [
        {
            "id": CREDENTIAL_ID,
            "name": "LangBot peers header",
            "type": "httpHeaderAuth",
            "data": {"name": HEADER_NAME, "value": HEADER_VALUE},
        }
    ]
