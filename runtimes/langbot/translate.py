"""Translation between LangBot's runner protocol (langbot-plugin ≥ 0.7) and ours (`langbot_sdk.protocol`).

Both descend from the same Protocol v1, so most shapes match; what differs is spelled out here, one
function per direction: LangBot's runner listing → our `AgentRunnerManifest`, our run context → LangBot's
`RunnerContext`, LangBot's `RunnerResult`s → our result dicts, and LangBot's run-scoped host calls →
our proxy actions (and our answers back). Nothing here does I/O.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from langbot_sdk.protocol import (
    Action,
    AgentRunnerManifest,
    DynamicFormItemSchema,
    PluginLoadReport,
    RunnerId,
)

logger = logging.getLogger(__name__)

# --- catalog ------------------------------------------------------------------------------------------

_CAPABILITIES = ("streaming", "tool_calling", "knowledge_retrieval", "multimodal_input", "interrupt")
# LangBot's model operation `count_tokens` needs no grant here: any model granted to the run may be counted.
_UNGATED: dict[str, set[str]] = {"models": {"count_tokens"}}
_PERMISSIONS: dict[str, set[str]] = {
    "models": {"invoke", "stream", "rerank"},
    "tools": {"detail", "call"},
    "knowledge_bases": {"list", "retrieve"},
    "history": {"page", "search"},
    "events": {"get", "page"},
    "storage": {"plugin", "workspace"},
}


def runner_manifest(entry: dict[str, Any]) -> tuple[AgentRunnerManifest, list[str]]:
    """Our manifest of one entry of LangBot's `list_runners`, and what of it was dropped (warnings).

    Raises `ValueError` when the entry cannot be a runner of ours (no valid `plugin:a/p/r` id)."""
    manifest = entry.get("manifest") or {}
    runner_id = str(manifest.get("id") or "")
    parsed = RunnerId.parse(runner_id)
    warnings: list[str] = []
    capabilities_in = manifest.get("capabilities") or {}
    capabilities = {name: bool(capabilities_in.get(name)) for name in _CAPABILITIES}
    unknown = sorted(name for name, on in capabilities_in.items() if on and name not in _CAPABILITIES)
    if unknown:
        warnings.append(f"{runner_id}: capability {unknown} has no equivalent on this host")
    permissions: dict[str, list[str]] = {}
    for family, allowed in _PERMISSIONS.items():
        requested = list((manifest.get("permissions") or {}).get(family) or [])
        permissions[family] = [op for op in requested if op in allowed]
        dropped = [op for op in requested if op not in allowed and op not in _UNGATED.get(family, set())]
        if dropped:
            warnings.append(f"{runner_id}: permission {family} {dropped} has no equivalent on this host")
    config_schema = []
    for item in manifest.get("config_schema") or entry.get("config") or []:
        try:
            config_schema.append(DynamicFormItemSchema.model_validate(_form_item(item)))
        except (ValidationError, ValueError) as exc:
            warnings.append(f"{runner_id}: config item {item.get('name')!r} dropped: {_first_error(exc)}")
    label = manifest.get("label") or {"en_US": parsed.runner}
    ours = AgentRunnerManifest(
        id=runner_id,
        name=parsed.runner,
        label=label,
        description=manifest.get("description") or None,
        capabilities=capabilities,
        permissions=permissions,
        context={"supports_history_search": "search" in permissions["history"]},
        config_schema=config_schema,
        metadata={
            "plugin": {
                "author": parsed.author,
                "name": parsed.plugin,
                "version": str(entry.get("plugin_version") or ""),
            },
            "langbot": {
                "usages": manifest.get("usages") or [],
                "component_kind": manifest.get("component_kind"),
                # Kept with the descriptor so the admin's runner list can show what the mapping dropped.
                "warnings": warnings,
            },
        },
    )
    return ours, warnings


def _form_item(item: dict[str, Any]) -> dict[str, Any]:
    known = set(DynamicFormItemSchema.model_fields)
    data = {key: value for key, value in item.items() if key in known and value is not None}
    data.setdefault("label", {"en_US": str(item.get("name") or "")})
    if data.get("description") in ({}, ""):
        data["description"] = None
    return data


def _first_error(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        errors = exc.errors()
        return str(errors[0]["msg"]) if errors else str(exc)
    return str(exc)


def load_reports(entries: list[dict[str, Any]], warnings: dict[str, list[str]]) -> list[PluginLoadReport]:
    """One loaded-plugin report per LangBot plugin that lists runners."""
    plugins: dict[str, PluginLoadReport] = {}
    for entry in entries:
        key = f"{entry.get('plugin_author')}/{entry.get('plugin_name')}"
        report = plugins.setdefault(
            key,
            PluginLoadReport(
                path=f"langbot:{key}",
                author=str(entry.get("plugin_author") or ""),
                name=str(entry.get("plugin_name") or ""),
                version=str(entry.get("plugin_version") or ""),
                status="loaded",
            ),
        )
        runner_id = str((entry.get("manifest") or {}).get("id") or "")
        if runner_id:
            report.runner_ids.append(runner_id)
        report.warnings.extend(warnings.get(runner_id, []))
    return list(plugins.values())


def plugin_identity(plugin: dict[str, Any]) -> str:
    """`author/name` of one entry of LangBot's `list_plugins`."""
    metadata = (((plugin.get("manifest") or {}).get("manifest") or {}).get("metadata")) or {}
    return f"{metadata.get('author')}/{metadata.get('name')}"


def unloaded_plugin_reports(plugins: list[dict[str, Any]], listed: set[str]) -> list[PluginLoadReport]:
    """Error reports of the plugins LangBot's runtime registered without a runner of theirs: one that mounted
    no component at all, or whose declared component kinds did not all mount (a kind this release of LangBot's
    SDK does not know is skipped without a word)."""
    reports = []
    for plugin in plugins:
        identity = plugin_identity(plugin)
        if identity in listed:
            continue
        raw = (plugin.get("manifest") or {}).get("manifest") or {}
        declared = set(((raw.get("spec") or {}).get("components") or {}).keys())
        mounted = {
            str(((component.get("manifest") or {}).get("manifest") or {}).get("kind"))
            for component in plugin.get("components") or []
            if isinstance(component, dict)
        }
        missing = sorted(declared - mounted)
        if mounted and not missing:
            continue
        if missing:
            error = f"LangBot plugin {identity} mounted without its {missing} components: the kind is unknown to the "
            error += "LangBot runtime's plugin SDK or the components failed to load"
        else:
            error = f"LangBot plugin {identity} mounted with no components"
        author, _, name = identity.partition("/")
        version = str((raw.get("metadata") or {}).get("version") or "")
        reports.append(
            PluginLoadReport(
                path=f"langbot:{identity}", author=author, name=name, version=version, status="error", error=error
            )
        )
    return reports


# --- run context ----------------------------------------------------------------------------------------

_TRIGGER_SOURCES = {"platform", "webui", "api", "scheduler", "system", "host_adapter"}


def run_context(context: dict[str, Any]) -> dict[str, Any]:
    """LangBot's `RunnerContext` for our run context (a dumped `AgentRunContext`)."""
    out = {
        key: context[key]
        for key in (
            "run_id", "event", "conversation", "actor", "subject", "input", "delivery", "context", "state",
            "runtime", "config", "metadata",
        )
        if key in context
    }  # fmt: skip
    conversation = context.get("conversation")
    actor = context.get("actor") or {}
    if isinstance(conversation, dict) and actor.get("actor_id"):
        # LangBot names the sender by the same raw platform id as a person launcher (`launcher_id`), so a
        # runner keying users by either sees one person, in a private chat and in a group alike.
        out["conversation"] = {**conversation, "sender_id": str(actor["actor_id"])}
    trigger = dict(context.get("trigger") or {})
    if trigger.get("source") not in _TRIGGER_SOURCES:
        trigger["source"] = "host_adapter"
    out["trigger"] = trigger
    resources = dict(context.get("resources") or {})
    areas = set((resources.get("storage") or {}).get("areas") or [])
    out["resources"] = {
        "models": [
            {
                "model_id": model["model_id"],
                "model_type": model.get("kind"),
                "provider": model.get("provider"),
                "operations": _model_operations(model.get("operations") or []),
            }
            for model in resources.get("models") or []
        ],
        "tools": [
            {
                "tool_name": tool["tool_name"],
                "tool_type": tool.get("tool_type") or tool.get("kind"),
                "description": tool.get("description"),
                "parameters": tool.get("parameters"),
                "operations": tool.get("operations") or [],
            }
            for tool in resources.get("tools") or []
        ],
        "knowledge_bases": [
            {
                "kb_id": kb["kb_id"],
                "kb_name": kb.get("name") or kb.get("kb_name"),
                "operations": kb.get("operations") or [],
            }
            for kb in resources.get("knowledge_bases") or []
        ],
        "storage": {"plugin_storage": "plugin" in areas, "workspace_storage": "workspace" in areas},
        "platform_capabilities": resources.get("platform_capabilities") or {},
    }
    adapter = context.get("adapter")
    if adapter:
        out["adapter"] = {"extra": {"adapter_type": adapter.get("adapter_type"), **(adapter.get("data") or {})}}
    return out


def _model_operations(operations: list[str]) -> list[str]:
    """LangBot's SDK checks `count_tokens` as an operation of its own; here it comes with any grant. An empty
    list means every operation to the SDK, so it stays empty."""
    kept = [op for op in operations if op in _PERMISSIONS["models"]]
    return [*kept, "count_tokens"] if kept else []


# --- results --------------------------------------------------------------------------------------------

_MESSAGE_FIELDS = ("role", "content", "name", "tool_calls", "tool_call_id")


def _message(message: Any) -> dict[str, Any]:
    message = message if isinstance(message, dict) else {}
    out = {key: message[key] for key in _MESSAGE_FIELDS if message.get(key) is not None}
    out.setdefault("role", "assistant")
    return out


def results(result: dict[str, Any], run_id: str) -> list[dict[str, Any]]:
    """Our results for one LangBot `RunnerResult` (none, one, or two: LangBot's `run.completed` may carry the
    final message, which is a `message.completed` of ours before our `run.completed`)."""
    kind = str(result.get("type") or "")
    raw = result.get("data")
    data: dict[str, Any] = raw if isinstance(raw, dict) else {}
    usage = result.get("usage")
    if kind == "message.delta":
        return [{"run_id": run_id, "type": kind, "data": {"chunk": _message(data.get("chunk"))}}]
    if kind == "message.completed":
        return [{"run_id": run_id, "type": kind, "data": {"message": _message(data.get("message"))}}]
    if kind in ("tool.call.started", "tool.call.completed", "state.updated"):
        keep = ("tool_call_id", "tool_name", "parameters", "result", "error", "scope", "key", "value")
        return [{"run_id": run_id, "type": kind, "data": {k: data[k] for k in keep if k in data}}]
    if kind == "action.requested":
        payload = {
            "action": data.get("action"),
            "target": data.get("target") or {},
            "payload": data.get("payload") or {},
        }
        return [{"run_id": run_id, "type": kind, "data": payload}]
    if kind == "run.completed":
        out = []
        if data.get("message"):
            out.append({"run_id": run_id, "type": "message.completed", "data": {"message": _message(data["message"])}})
        completed: dict[str, Any] = {"finish_reason": data.get("finish_reason") or "stop"}
        if isinstance(usage, dict):
            completed["usage"] = usage
        out.append({"run_id": run_id, "type": kind, "data": completed})
        return out
    if kind == "run.failed":
        failed = {
            "code": str(data.get("code") or "runner.error"),
            "message": str(data.get("error") or data.get("message") or "the runner failed"),
            "retryable": bool(data.get("retryable")),
        }
        return [{"run_id": run_id, "type": kind, "data": failed}]
    if kind == "processor.log":
        logger.info("run %s: LangBot runner log (%s): %s", run_id, data.get("level"), data.get("text"))
        return []
    # Unknown types pass on; the host ignores them with a warning, as for our own runners.
    return [{"run_id": run_id, "type": kind, "data": data}]


# --- host calls -----------------------------------------------------------------------------------------

_STORAGE_ACTIONS = {
    "set_binary_storage": Action.STORAGE_SET,
    "get_binary_storage": Action.STORAGE_GET,
    "delete_binary_storage": Action.STORAGE_DELETE,
    "get_binary_storage_keys": Action.STORAGE_LIST,
}


def _tools(funcs: Any) -> list[dict[str, Any]] | None:
    if not funcs:
        return None
    return [
        {
            "type": "function",
            "function": {
                "name": func.get("name"),
                "description": func.get("description") or func.get("human_desc") or "",
                "parameters": func.get("parameters") or {},
            },
        }
        for func in funcs
        if isinstance(func, dict)
    ]


def _pick(data: dict[str, Any], *names: str) -> dict[str, Any]:
    return {name: data[name] for name in names if data.get(name) is not None}


def host_call(action: str, data: dict[str, Any]) -> tuple[Action, dict[str, Any]] | None:
    """Our proxy action and request for one of LangBot's run-scoped host calls (without `run_id`, token and
    caller, which the bridge stamps), or None when the call has no equivalent here."""
    if action in ("state_get", "state_delete"):
        return Action(action), _pick(data, "scope", "key")
    if action == "state_set":
        return Action.STATE_SET, {"scope": data.get("scope"), "key": data.get("key"), "value": data.get("value")}
    if action == "state_list":
        return Action.STATE_LIST, _pick(data, "scope", "prefix", "limit")
    if action == "history_page":
        request = _pick(data, "conversation_id", "before_cursor", "after_cursor", "limit", "direction")
        request["include_artifacts"] = bool(data.get("include_attachments"))
        return Action.HISTORY_PAGE, request
    if action == "history_search":
        filters = data.get("filters") or {}
        request = _pick(data, "query", "top_k")
        known = _pick(filters, "conversation_id", "thread_id", "event_types", "roles")
        if known:
            request["filters"] = known
        return Action.HISTORY_SEARCH, request
    if action == "event_get":
        return Action.EVENT_GET, _pick(data, "event_id")
    if action == "event_page":
        return Action.EVENT_PAGE, _pick(data, "conversation_id", "event_types", "before_cursor", "limit")
    if action in ("invoke_llm", "invoke_llm_stream", "count_tokens"):
        request = {
            "model_id": data.get("llm_model_uuid"),
            "messages": [_message(message) for message in data.get("messages") or []],
        }
        if action != "count_tokens":
            tools = _tools(data.get("funcs"))
            if tools:
                request["tools"] = tools
            if data.get("extra_args"):
                request["extra_args"] = data["extra_args"]
        return Action(action), request
    if action == "invoke_rerank":
        request = {
            "model_id": data.get("rerank_model_uuid"),
            "query": data.get("query"),
            "documents": data.get("documents") or [],
        }
        if data.get("top_k") is not None:
            request["top_k"] = data["top_k"]
        return Action.INVOKE_RERANK, request
    if action == "get_tool_detail":
        return Action.GET_TOOL_DETAIL, _pick(data, "tool_name")
    if action == "call_tool":
        return Action.CALL_TOOL, {"tool_name": data.get("tool_name"), "parameters": data.get("parameters") or {}}
    if action == "retrieve_knowledge_base":
        return Action.RETRIEVE_KNOWLEDGE_BASE, _pick(data, "kb_id", "query_text", "top_k", "filters")
    if action in _STORAGE_ACTIONS and data.get("run_id"):
        ours = _STORAGE_ACTIONS[action]
        request = {"area": data.get("owner_type")}
        if ours != Action.STORAGE_LIST:
            request["key"] = data.get("key")
        if ours == Action.STORAGE_SET:
            request["value_base64"] = data.get("value_base64")
        return ours, request
    return None


def _transcript_item(item: dict[str, Any]) -> dict[str, Any]:
    """LangBot's `TranscriptItem`: ids under its names, `created_at` in epoch seconds (ours is ISO 8601)."""
    out = {**item, "transcript_id": item.get("item_id"), "event_id": item.get("event_id") or ""}
    created = item.get("created_at")
    out["created_at"] = int(datetime.fromisoformat(created).timestamp()) if isinstance(created, str) else created
    return out


def host_answer(action: str, ours: Action, answer: dict[str, Any]) -> dict[str, Any]:
    """LangBot's answer shape for our handler's answer to a translated call."""
    if ours == Action.STATE_SET:
        return {**answer, "success": True}
    if ours == Action.STATE_DELETE:
        return {**answer, "success": bool(answer.get("deleted"))}
    if ours in (Action.HISTORY_PAGE, Action.HISTORY_SEARCH):
        return {**answer, "items": [_transcript_item(item) for item in answer.get("items") or []]}
    if ours == Action.GET_TOOL_DETAIL:
        return {"tool": {**answer, "name": answer.get("tool_name")}}
    if ours == Action.CALL_TOOL:
        return {"result": tool_result(answer)}
    if ours == Action.INVOKE_RERANK:
        return {"results": [_rerank_item(item) for item in answer.get("results") or []]}
    if ours == Action.RETRIEVE_KNOWLEDGE_BASE:
        return {**answer, "results": answer.get("entries") or []}
    if ours == Action.STORAGE_GET:
        return {**answer, "value_base64": answer.get("value_base64") or ""}
    if ours == Action.STORAGE_LIST:
        return {**answer, "keys": answer.get("keys") or []}
    if ours == Action.STORAGE_SET or ours == Action.STORAGE_DELETE:
        return {**answer, "success": True}
    return answer


def tool_result(answer: dict[str, Any]) -> dict[str, Any]:
    """LangBot's tool result, which its SDK requires to be an object (`ToolCallCompletedPayload.result`), for
    our `CallToolResult`. A text result is `{"content": <text>}`; a long result stored as an artifact keeps
    our reference object (`preview`, `artifact_id`, `size`, `truncated`). A tool that reported an error is
    still an answer, as in our protocol (`is_error: true`, the tool's words in `content`), so the runner can
    hand it to its model; a call the host refused is LangBot's error shape instead (see the bridge)."""
    result = answer.get("result")
    out: dict[str, Any] = dict(result) if isinstance(result, dict) else {"content": "" if result is None else result}
    if answer.get("is_error"):
        out["is_error"] = True
    return out


def _rerank_item(item: dict[str, Any]) -> dict[str, Any]:
    """LangBot's rerank score (`index`, `relevance_score`) for one of ours (`index`, `score`, `document`)."""
    out = {"index": item.get("index"), "relevance_score": item.get("score")}
    if item.get("document") is not None:
        out["document"] = item["document"]
    return out


def stream_answer(ours: Action, item: dict[str, Any]) -> dict[str, Any]:
    """LangBot's `invoke_llm_stream` frame (`{chunk, usage}`) for one of ours (`{delta, usage, finish_reason}`)."""
    if ours != Action.INVOKE_LLM_STREAM:
        return item
    frame: dict[str, Any] = {}
    delta = item.get("delta")
    if isinstance(delta, dict):
        frame["chunk"] = {**_message(delta), "is_final": item.get("finish_reason") is not None}
    if isinstance(item.get("usage"), dict):
        frame["usage"] = item["usage"]
    return frame
