"""The bot credential schemas of the platforms, as the bindings app asks for them (installed into
`bindings.services.bot_credential_schemas` by `PlatformsConfig.ready`): each adapter's declared
`credential_schema` checks a bot's credentials when it is saved (REST and admin) and gives the admin's
bot form one field per credential. A bot of a platform no adapter serves (and that the host does not
serve itself: the web UI, the API) is refused."""

from __future__ import annotations

from typing import Any

from bindings.models import Bot
from platforms.interface import CredentialField
from platforms.registry import adapter_class, adapter_classes

# Platforms the host serves itself, with no adapter: the web chat and events posted to the REST API.
HOST_SERVED_PLATFORMS = frozenset({Bot.Platform.WEBUI.value, Bot.Platform.API.value})


class AdapterCredentialSchemas:
    """`bindings.services.BotCredentialSchemas` from the registered adapters."""

    def served(self, platform: str) -> bool:
        return platform in HOST_SERVED_PLATFORMS or adapter_class(platform) is not None

    def problems(self, platform: str, credentials: dict[str, Any]) -> dict[str, str]:
        cls = adapter_class(platform)
        return cls.credentials_problems(credentials) if cls is not None else {}

    def fields(self) -> dict[str, tuple[CredentialField, ...]]:
        return {platform: cls.credential_schema for platform, cls in adapter_classes().items()}

    def help_text(self) -> str:
        lines = []
        for platform, cls in sorted(adapter_classes().items()):
            if not cls.credential_schema:
                continue
            fields = ", ".join(
                f"{item.name}{'' if item.required else '?'}{' (secret)' if item.secret else ''}: {item.help}"
                for item in cls.credential_schema
            )
            lines.append(f"{platform} — {fields}")
        return " ".join(f"[{line}]" for line in lines)
