"""The Langflow flow the peers tests run, written here and assembled from the running Langflow's own
component registry (`GET /api/v1/all`, `POST /api/v1/custom_component`), so the nodes' templates are the
version's own: Chat Input → "Echo" (a custom component of our own) → Chat Output.

Echo answers `echo: <text>`; a text starting with `fail` makes it raise `ValueError("echo refused: …")`,
a component failing as a flow's component fails.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx

ECHO_CODE = """
from langflow.custom import Component
from langflow.io import MessageInput, Output
from langflow.schema.message import Message


class Echo(Component):
    display_name = "Echo"
    description = "Answers the text it is given, prefixed; refuses a text starting with 'fail'."
    inputs = [MessageInput(name="text", display_name="Text")]
    outputs = [Output(display_name="Message", name="message", method="echo")]

    def echo(self) -> Message:
        text = self.text.text if isinstance(self.text, Message) else str(self.text)
        if text.startswith("fail"):
            raise ValueError(f"echo refused: {text}")
        return Message(text=f"echo: {text}")
"""


def _handle(value: dict[str, Any]) -> str:
    # Langflow writes a handle's JSON with "œ" for each double quote in the edge's handle strings.
    return json.dumps(value, separators=(",", ":")).replace('"', "œ")


def _node(node_id: str, node_type: str, template: dict[str, Any], x: int) -> dict[str, Any]:
    return {
        "id": node_id,
        "type": "genericNode",
        "position": {"x": x, "y": 0},
        "data": {"id": node_id, "type": node_type, "node": template},
    }


def _edge(source: dict[str, Any], target: dict[str, Any], field: str) -> dict[str, Any]:
    output = source["data"]["node"]["outputs"][0]
    field_spec = target["data"]["node"]["template"][field]
    source_handle = {"dataType": source["data"]["type"], "id": source["id"], "name": output["name"],
                     "output_types": output["types"]}  # fmt: skip
    target_handle = {"fieldName": field, "id": target["id"], "inputTypes": field_spec.get("input_types"),
                     "type": field_spec["type"]}  # fmt: skip
    return {
        "id": f"edge-{source['id']}-{target['id']}",
        "source": source["id"],
        "target": target["id"],
        "sourceHandle": _handle(source_handle),
        "targetHandle": _handle(target_handle),
        "data": {"sourceHandle": source_handle, "targetHandle": target_handle},
    }


def echo_flow_create(client: httpx.Client, *, endpoint_name: str) -> str:
    """Create the echo flow with the signed-in `client`; its id."""
    registry = client.get("/api/v1/all")
    registry.raise_for_status()
    components = registry.json()["input_output"]
    built = client.post("/api/v1/custom_component", json={"code": ECHO_CODE})
    built.raise_for_status()
    chat_input = _node(f"ChatInput-{uuid.uuid4().hex[:5]}", "ChatInput", components["ChatInput"], 0)
    echo = _node(f"CustomComponent-{uuid.uuid4().hex[:5]}", "CustomComponent", built.json()["data"], 400)
    chat_output = _node(f"ChatOutput-{uuid.uuid4().hex[:5]}", "ChatOutput", components["ChatOutput"], 800)
    data = {
        "nodes": [chat_input, echo, chat_output],
        "edges": [_edge(chat_input, echo, "text"), _edge(echo, chat_output, "input_value")],
        "viewport": {"x": 0, "y": 0, "zoom": 1},
    }
    body = {"name": f"LangBot echo {endpoint_name}", "endpoint_name": endpoint_name, "data": data}
    created = client.post("/api/v1/flows/", json=body)
    created.raise_for_status()
    return str(created.json()["id"])
