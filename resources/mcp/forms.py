"""The admin form of MCP servers.

Validation is the API's (`resources.mcp.specs`, `resources.mcp.services`), its field errors shown on the
matching form fields. `env` and `headers` values are shown as the mask; a mask that comes back keeps the
stored value. The admin is staff's, who count as operators for stdio servers (`resources.mcp.policy`):
the command must still be on `LANGBOT_MCP_STDIO_COMMANDS`, and a url must pass the outbound guard for the
chosen workspace.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.utils.text import format_lazy
from django.utils.translation import gettext_lazy as _
from pydantic import ValidationError

from bindings.models import Workspace
from bindings.selectors import workspace_private_addresses_allowed
from foundation.api_errors import FieldsRefusedError, field_errors
from foundation.crypto import SECRET_MASK
from resources.forms import SpecAdminForm
from resources.mcp.policy import MCPStdioRefusedError, mcp_stdio_change_check
from resources.mcp.selectors import mcp_server_env_masked, mcp_server_headers_masked
from resources.mcp.services import mcp_secret_merge, mcp_transport_check
from resources.mcp.specs import MCPServerIn
from resources.models import MCPServer


class MCPServerAdminForm(SpecAdminForm[MCPServer]):
    spec_inputs = {"env": "env_input", "headers": "headers_input", "args": "args_input"}

    args_input = forms.JSONField(
        label=_("Arguments"),
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text=_('stdio: a JSON list of strings, e.g. ["-y", "@modelcontextprotocol/server-everything"].'),
    )
    env_input = forms.JSONField(
        label=_("Environment"),
        required=False,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text=format_lazy(
            _(
                'stdio: a JSON object, e.g. {{"API_KEY": "..."}}; the host\'s own environment is never passed. '
                "Stored values show as {mask}; leave them so to keep them. A variable removed here is deleted."
            ),
            mask=SECRET_MASK,
        ),
    )
    headers_input = forms.JSONField(
        label=_("Headers"),
        required=False,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text=format_lazy(
            _(
                'http: a JSON object, e.g. {{"Authorization": "Bearer ..."}}. Stored values show as {mask}; '
                "leave them so to keep them."
            ),
            mask=SECRET_MASK,
        ),
    )

    class Meta:
        model = MCPServer
        fields = ["workspace", "server_id", "name", "transport", "command", "url", "timeout_seconds", "enabled"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.env: dict[str, str] = {}
        self.headers: dict[str, str] = {}
        self.args: list[str] = []
        if self.instance.pk:
            self.initial["args_input"] = list(self.instance.args or [])
            self.initial["env_input"] = mcp_server_env_masked(self.instance)
            self.initial["headers_input"] = mcp_server_headers_masked(self.instance)

    def clean(self) -> dict[str, Any] | None:
        cleaned = super().clean() or {}
        values = {
            "name": cleaned.get("name") or "",
            "transport": cleaned.get("transport") or "",
            "command": cleaned.get("command") or "",
            "args": cleaned.get("args_input") or [],
            "env": cleaned.get("env_input") or {},
            "url": cleaned.get("url") or "",
            "headers": cleaned.get("headers_input") or {},
            "timeout_seconds": cleaned.get("timeout_seconds"),
            "enabled": bool(cleaned.get("enabled")),
        }
        workspace = cleaned.get("workspace") or (self.instance.workspace if self.instance.workspace_id else None)
        allow_private = isinstance(workspace, Workspace) and workspace_private_addresses_allowed(workspace=workspace)
        stored = MCPServer.objects.filter(pk=self.instance.pk).first() if self.instance.pk else None
        try:
            spec = mcp_transport_check(MCPServerIn.model_validate(values), allow_private=allow_private)
            self.env, self.headers = mcp_secret_merge(env=spec.env, headers=spec.headers, server=stored)
            if spec.transport == "stdio":
                mcp_stdio_change_check(command=spec.command, args=spec.args, env=self.env, stored=stored, operator=True)
        except ValidationError as exc:
            self.add_spec_errors(field_errors(exc))
            return cleaned
        except FieldsRefusedError as exc:
            self.add_spec_errors(exc.fields)
            return cleaned
        except MCPStdioRefusedError as exc:
            self.add_spec_errors({"command": exc.message})
            return cleaned
        self.args = list(spec.args)
        cleaned["command"], cleaned["url"] = spec.command, spec.url
        return cleaned
