"""The bot credential schemas of the platforms, as the bindings app asks for them (installed into
`bindings.services.bot_credential_schemas` by `PlatformsConfig.ready`): each adapter's declared
`credential_schema` checks a bot's credentials when it is saved (REST and admin) and describes them on the
admin's bot form. Platforms whose adapter declares no schema are not checked."""

from __future__ import annotations

from typing import Any

from platforms.registry import adapter_class, adapter_classes


class AdapterCredentialSchemas:
    """`bindings.services.BotCredentialSchemas` from the registered adapters."""

    def problems(self, platform: str, credentials: dict[str, Any]) -> dict[str, str]:
        cls = adapter_class(platform)
        return cls.credentials_problems(credentials) if cls is not None else {}

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
