"""Base classes shared by every protocol model, and the i18n text type.

Direction decides strictness: what the host sends to runners is read leniently (``HostModel`` ignores
unknown fields, so a newer host never breaks an older runner); what a runner or the plugin runtime sends
to the host is checked strictly (``RunnerModel`` forbids unknown fields, so typos and smuggled data fail
loudly at the boundary where the host enforces authorization).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, RootModel

PROTOCOL_VERSION = "v1"


class HostModel(BaseModel):
    """Base for everything the host sends to runners: unknown fields are ignored."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)


class RunnerModel(BaseModel):
    """Base for everything a runner or the plugin runtime sends to the host: unknown fields are rejected.

    Values are still coerced in pydantic's default (lax) mode — JSON has no enum or tuple types, and a
    runner yielding ``{"type": "message.completed"}`` must validate the same as the typed object.
    """

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class ProxyRequest(RunnerModel):
    """Common fields of every runtime → host proxy action payload.

    ``run_id`` names the run the call is for. ``caller_plugin_identity`` (``author/name``) and ``run_token``
    are stamped by the plugin runtime from the run whose task makes the call, never taken from runner code:
    the token is the unguessable credential the host issued to that run alone (``AgentRunRequest.run_token``),
    and the host serves a call only when its ``run_id``, the token's run and the caller identity agree.
    """

    run_id: str = Field(min_length=1)
    caller_plugin_identity: str | None = None
    run_token: str | None = None


def _i18n_from_str(value: Any) -> Any:
    # Manifests may write `label: QA Runner`; normalise to the map form so consumers see one shape.
    if isinstance(value, str):
        return {"en_US": value}
    return value


def _i18n_not_empty(value: dict[str, str]) -> dict[str, str]:
    if not value:
        raise ValueError("i18n text needs at least one locale, e.g. {'en_US': '...'}")
    return value


class I18nObject(
    RootModel[
        Annotated[
            dict[str, str],
            BeforeValidator(_i18n_from_str, json_schema_input_type=str | dict[str, str]),
            AfterValidator(_i18n_not_empty),
        ]
    ]
):
    """Human-readable text in several locales (``en_US``, ``zh_Hans``, ...).

    Accepts a plain string (stored as ``{"en_US": s}``) or a non-empty locale → text map.
    """

    def text(self, locale: str = "en_US") -> str:
        """The text for ``locale``, falling back to ``en_US``, then to any locale present."""
        if locale in self.root:
            return self.root[locale]
        if "en_US" in self.root:
            return self.root["en_US"]
        return next(iter(self.root.values()), "")

    def __str__(self) -> str:
        return self.text()
