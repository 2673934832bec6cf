"""Which adapter serves which platform. An adapter module is listed here by dotted path and imported at
start-up (`PlatformsConfig.ready`); nothing else needs to know the adapters exist."""

from __future__ import annotations

from functools import cache
from typing import Any

from django.utils.module_loading import import_string

from bindings.models import Bot
from bindings.selectors import workspace_private_addresses_allowed
from platforms.interface import PlatformAdapter

ADAPTER_PATHS: tuple[str, ...] = (
    "platforms.adapters.telegram.TelegramAdapter",
    "platforms.adapters.slack.SlackAdapter",
    "platforms.adapters.lark.LarkAdapter",
    "platforms.adapters.discord.DiscordAdapter",
    "platforms.adapters.onebot.OneBotAdapter",
    "platforms.adapters.dingtalk.DingTalkAdapter",
    "platforms.adapters.wecom.WeComAdapter",
    "platforms.adapters.wecom_aibot.WeComAIBotAdapter",
    "platforms.adapters.wecom_kf.WeComKfAdapter",
    "platforms.adapters.wechat_oa.WeChatOAAdapter",
    "platforms.adapters.line.LineAdapter",
    "platforms.adapters.qq_official.QQOfficialAdapter",
    "platforms.adapters.mattermost.MattermostAdapter",
    "platforms.adapters.kook.KookAdapter",
    "platforms.adapters.satori.SatoriAdapter",
    "platforms.adapters.matrix.MatrixAdapter",
)


@cache
def adapter_classes() -> dict[str, type[PlatformAdapter]]:
    classes: dict[str, type[PlatformAdapter]] = {}
    for path in ADAPTER_PATHS:
        cls = import_string(path)
        classes[cls.platform] = cls
    return classes


def adapter_class(platform: str) -> type[PlatformAdapter] | None:
    return adapter_classes().get(platform)


def adapter_for_bot(bot: Bot, **overrides: Any) -> PlatformAdapter | None:
    """A fresh adapter with the bot's (decrypted) credentials, or None when the platform has no adapter."""
    cls = adapter_class(bot.platform)
    if cls is None:
        return None
    # The bot's workspace is read here: callers on an event loop load it with the bot.
    allow_private = workspace_private_addresses_allowed(workspace=bot.workspace)
    return cls(bot_id=bot.bot_id, credentials={**(bot.credentials or {}), **overrides}, allow_private=allow_private)
