"""Runner discovery: the wire manifest (docs/protocol.md, "Host → runtime") and the plugin YAML manifests it is built
from.

Two layers:

* Wire models (``AgentRunnerManifest`` and its parts, ``ListAgentRunnersResponse``) travel runtime →
  host and are strict (``RunnerModel``).
* YAML models (``PluginManifest``, ``AgentRunnerComponentManifest``) are read from plugin directories.
  Real manifests carry keys this protocol does not use (``permissions.files``, ``capabilities.host_state``,
  LangBot form options, ...). They are dropped before validation and their dotted paths are kept in
  ``ignored_fields`` so the runtime can warn; known keys are still validated strictly.

Config form item types follow this protocol's names; LangBot-style aliases are mapped on load:

=================================  =====================================================
alias                              becomes
=================================  =====================================================
``int``                            ``integer``
``float``                          ``number``
``bool``                           ``boolean``
``str``                            ``string``
``textarea``, ``long-text``        ``text``
``password``                       ``secret``
``array[string]``                  ``string`` with ``multiple: true``
``llm-model-selector``             ``model-selector`` with ``model_kind: llm``
``embedding-model-selector``       ``model-selector`` with ``model_kind: embedding``
``rerank-model-selector``          ``model-selector`` with ``model_kind: rerank``
``knowledge-base-multi-selector``  ``knowledge-base-selector`` with ``multiple: true``
=================================  =====================================================

Unknown types are an error naming the accepted ones (the plugin is then reported, not loaded).
"""

from __future__ import annotations

import types
from enum import StrEnum
from typing import Annotated, Any, Literal, Self, Union, get_args, get_origin

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    RootModel,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo

from langbot_sdk.protocol.base import I18nObject, RunnerModel
from langbot_sdk.protocol.runner_id import RunnerId, validate_id_part

MANIFEST_API_VERSION = "langbot/v1"


class DynamicFormItemType(StrEnum):
    STRING = "string"
    TEXT = "text"
    INTEGER = "integer"
    NUMBER = "number"
    BOOLEAN = "boolean"
    SELECT = "select"
    JSON = "json"
    SECRET = "secret"
    PROMPT_EDITOR = "prompt-editor"
    MODEL_SELECTOR = "model-selector"
    KNOWLEDGE_BASE_SELECTOR = "knowledge-base-selector"


ModelKind = Literal["llm", "embedding", "rerank"]

# alias → (canonical type, fields the alias implies)
FORM_TYPE_ALIASES: dict[str, tuple[DynamicFormItemType, dict[str, Any]]] = {
    "int": (DynamicFormItemType.INTEGER, {}),
    "float": (DynamicFormItemType.NUMBER, {}),
    "bool": (DynamicFormItemType.BOOLEAN, {}),
    "str": (DynamicFormItemType.STRING, {}),
    "textarea": (DynamicFormItemType.TEXT, {}),
    "long-text": (DynamicFormItemType.TEXT, {}),
    "password": (DynamicFormItemType.SECRET, {}),
    "array[string]": (DynamicFormItemType.STRING, {"multiple": True}),
    "llm-model-selector": (DynamicFormItemType.MODEL_SELECTOR, {"model_kind": "llm"}),
    "embedding-model-selector": (DynamicFormItemType.MODEL_SELECTOR, {"model_kind": "embedding"}),
    "rerank-model-selector": (DynamicFormItemType.MODEL_SELECTOR, {"model_kind": "rerank"}),
    "knowledge-base-multi-selector": (DynamicFormItemType.KNOWLEDGE_BASE_SELECTOR, {"multiple": True}),
}


class DynamicFormItemOption(RunnerModel):
    name: str
    label: I18nObject


class DynamicFormItemSchema(RunnerModel):
    """One field of a runner's binding config form."""

    name: str = Field(min_length=1)
    label: I18nObject
    type: DynamicFormItemType
    required: bool = False
    default: Any = None
    description: I18nObject | None = None
    placeholder: I18nObject | None = None
    options: list[DynamicFormItemOption] = Field(default_factory=list)
    """Choices of a ``select``."""
    multiple: bool = False
    """The value is a list (of strings, knowledge base ids, ...)."""
    model_kind: ModelKind | None = None
    """Which models a ``model-selector`` offers."""
    minimum: float | None = None
    """Smallest value an ``integer`` or ``number`` item accepts (inclusive)."""
    maximum: float | None = None
    """Largest value an ``integer`` or ``number`` item accepts (inclusive)."""
    json_type: Literal["object", "array"] | None = None
    """What a ``json`` item must hold: a JSON object or a list (any JSON value when unset)."""

    @model_validator(mode="before")
    @classmethod
    def _map_type_alias(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        raw = data.get("type")
        if isinstance(raw, str) and raw not in DynamicFormItemType._value2member_map_:
            if raw not in FORM_TYPE_ALIASES:
                accepted = sorted([*DynamicFormItemType._value2member_map_, *FORM_TYPE_ALIASES])
                raise ValueError(f"unknown config item type {raw!r}; accepted: {', '.join(accepted)}")
            canonical, implied = FORM_TYPE_ALIASES[raw]
            data = {**implied, **data, "type": canonical.value}
        return data

    @model_validator(mode="after")
    def _select_has_options(self) -> Self:
        if self.type is DynamicFormItemType.SELECT and not self.options:
            raise ValueError(f"config item {self.name!r} is a select without options")
        return self

    @model_validator(mode="after")
    def _bounds_fit_the_type(self) -> Self:
        numeric = self.type in (DynamicFormItemType.INTEGER, DynamicFormItemType.NUMBER)
        if (self.minimum is not None or self.maximum is not None) and not numeric:
            raise ValueError(f"config item {self.name!r}: minimum/maximum apply to integer and number items only")
        if self.minimum is not None and self.maximum is not None and self.minimum > self.maximum:
            raise ValueError(f"config item {self.name!r}: minimum {self.minimum} is above maximum {self.maximum}")
        if self.json_type is not None and self.type is not DynamicFormItemType.JSON:
            raise ValueError(f"config item {self.name!r}: json_type applies to json items only")
        return self


class AgentRunnerCapabilities(RunnerModel):
    streaming: bool = False
    tool_calling: bool = False
    knowledge_retrieval: bool = False
    multimodal_input: bool = False
    event_context: bool = True
    platform_api: bool = False
    interrupt: bool = False
    steering: bool = False
    """The runner reads more input while it runs (``run_input``, ``api.inputs``): under a binding's ``steer``
    concurrency policy a message sent during a run is handed to that run instead of queueing."""
    stateful_session: bool = False
    self_managed_context: bool = True


class AgentRunnerPermissions(RunnerModel):
    """The most a runner may ever use; the host narrows it by binding policy and run scope."""

    models: list[Literal["invoke", "stream", "rerank"]] = Field(default_factory=list)
    tools: list[Literal["detail", "call"]] = Field(default_factory=list)
    knowledge_bases: list[Literal["list", "retrieve"]] = Field(default_factory=list)
    history: list[Literal["page", "search"]] = Field(default_factory=list)
    events: list[Literal["get", "page"]] = Field(default_factory=list)
    artifacts: list[Literal["metadata", "read"]] = Field(default_factory=list)
    storage: list[Literal["plugin", "workspace", "binding"]] = Field(default_factory=list)
    platform_api: list[str] = Field(default_factory=list)


class AgentRunnerContextPolicy(RunnerModel):
    ownership: Literal["self_managed", "host_bootstrap", "hybrid"] = "self_managed"
    bootstrap: Literal["none", "current_event", "recent_tail", "summary_tail"] = "current_event"
    max_inline_events: int = Field(default=0, ge=0)
    max_inline_bytes: int = Field(default=0, ge=0)
    supports_history_pull: bool = True
    supports_history_search: bool = False
    supports_artifact_pull: bool = True
    owns_compaction: bool = True
    wants_static_context_refs: bool = True


class AgentRunnerManifest(RunnerModel):
    """What the runtime reports for one runner in ``list_agent_runners``."""

    id: str
    name: str
    label: I18nObject
    description: I18nObject | None = None
    capabilities: AgentRunnerCapabilities = Field(default_factory=AgentRunnerCapabilities)
    permissions: AgentRunnerPermissions = Field(default_factory=AgentRunnerPermissions)
    context: AgentRunnerContextPolicy = Field(default_factory=AgentRunnerContextPolicy)
    config_schema: list[DynamicFormItemSchema] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)
    """Display and diagnostics only; ``metadata["plugin"]`` holds the plugin's author, name, version,
    label and description."""


class PluginLoadReport(RunnerModel):
    """The outcome of loading one plugin directory; a broken plugin is reported, never fatal."""

    path: str
    author: str | None = None
    name: str | None = None
    version: str | None = None
    status: Literal["loaded", "error"]
    error: str | None = None
    runner_ids: list[str] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    """Non-fatal findings, e.g. manifest keys that were ignored."""


class ListAgentRunnersResponse(RunnerModel):
    runners: list[AgentRunnerManifest] = Field(default_factory=list)
    plugins: list[PluginLoadReport] = Field(default_factory=list)


# --- YAML manifests ---------------------------------------------------------------------------------


def _single_model(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model an annotation holds directly or through Optional, if exactly one."""
    if get_origin(annotation) is Annotated:
        return _single_model(get_args(annotation)[0])
    if get_origin(annotation) in (Union, types.UnionType):
        candidates = [_single_model(arg) for arg in get_args(annotation) if arg is not type(None)]
        models = [m for m in candidates if m is not None]
        return models[0] if len(models) == 1 else None
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


def _strip_value(annotation: Any, value: Any, path: str, ignored: list[str]) -> Any:
    origin = get_origin(annotation)
    if origin is Annotated:
        return _strip_value(get_args(annotation)[0], value, path, ignored)
    if origin in (Union, types.UnionType):
        if isinstance(value, list):
            lists = [arg for arg in get_args(annotation) if get_origin(arg) is list]
            if len(lists) == 1:
                return _strip_value(lists[0], value, path, ignored)
            return value
        model = _single_model(annotation)
        return _strip_value(model, value, path, ignored) if model is not None else value
    if origin is list and isinstance(value, list):
        (item_type,) = get_args(annotation) or (Any,)
        return [_strip_value(item_type, item, f"{path}[{i}]", ignored) for i, item in enumerate(value)]
    if (
        isinstance(annotation, type)
        and issubclass(annotation, BaseModel)
        and not issubclass(annotation, RootModel)
        and annotation.model_config.get("extra") != "allow"
        and isinstance(value, dict)
    ):
        return _strip_unknown(annotation, value, path, ignored)
    return value


def _strip_unknown(model: type[BaseModel], data: dict[Any, Any], path: str, ignored: list[str]) -> dict[Any, Any]:
    fields: dict[str, FieldInfo] = {}
    for name, info in model.model_fields.items():
        fields[name] = info
        if info.alias:
            fields[info.alias] = info
    kept: dict[Any, Any] = {}
    for key, value in data.items():
        key_path = f"{path}.{key}" if path else str(key)
        field = fields.get(key) if isinstance(key, str) else None
        if field is None:
            ignored.append(key_path)
            continue
        kept[key] = _strip_value(field.annotation, value, key_path, ignored)
    return kept


def manifest_unknown_fields(model: type[BaseModel], raw: Any) -> list[str]:
    """Dotted paths of the keys in ``raw`` that ``model`` does not know (e.g. ``spec.permissions.files``,
    ``spec.config[0].show_if``), in document order."""
    ignored: list[str] = []
    if isinstance(raw, dict):
        _strip_unknown(model, raw, "", ignored)
    return ignored


class _TolerantManifest(BaseModel):
    """Top level of a YAML manifest: unknown keys anywhere below are dropped and remembered."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    _ignored_fields: list[str] = PrivateAttr(default_factory=list)

    @model_validator(mode="wrap")
    @classmethod
    def _drop_unknown_keys(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        ignored: list[str] = []
        if isinstance(data, dict):
            data = _strip_unknown(cls, data, "", ignored)
        instance = handler(data)
        if isinstance(instance, _TolerantManifest) and ignored:
            instance._ignored_fields = ignored
        return instance

    @property
    def ignored_fields(self) -> list[str]:
        """Dotted paths of the keys that were present in the YAML but ignored."""
        return list(self._ignored_fields)


class _YamlSection(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)


class PythonExecution(_YamlSection):
    path: str = Field(min_length=1)
    """Python file, relative to the folder of the YAML that declares it."""
    attr: str = Field(min_length=1)
    """Name of the class (or object) in that file."""


class ExecutionSpec(_YamlSection):
    python: PythonExecution


def _version_str(value: Any) -> Any:
    # YAML reads `version: 1.0` as a float; a version is text.
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return value


class PluginMetadata(_YamlSection):
    author: str
    name: str
    version: str
    label: I18nObject
    description: I18nObject | None = None
    repository: str | None = None
    icon: str | None = None

    @field_validator("author")
    @classmethod
    def _check_author(cls, value: str) -> str:
        return validate_id_part(value, "plugin author")

    @field_validator("name")
    @classmethod
    def _check_name(cls, value: str) -> str:
        return validate_id_part(value, "plugin name")

    @field_validator("version", mode="before")
    @classmethod
    def _check_version(cls, value: Any) -> Any:
        return _version_str(value)


class FromDir(_YamlSection):
    path: str = Field(min_length=1)


class AgentRunnerComponentRef(_YamlSection):
    from_dirs: list[FromDir] = Field(default_factory=list, alias="fromDirs")


class PluginComponents(_YamlSection):
    agent_runner: AgentRunnerComponentRef | None = Field(default=None, alias="AgentRunner")


class PluginSpec(_YamlSection):
    components: PluginComponents = Field(default_factory=PluginComponents)


class PluginManifest(_TolerantManifest):
    """``manifest.yaml`` of a plugin directory."""

    api_version: Literal["langbot/v1"] = Field(alias="apiVersion")
    kind: Literal["Plugin"]
    metadata: PluginMetadata
    spec: PluginSpec = Field(default_factory=PluginSpec)
    execution: ExecutionSpec | None = None

    @property
    def identity(self) -> str:
        """``author/name``, the plugin identity stamped on proxy calls."""
        return f"{self.metadata.author}/{self.metadata.name}"

    def plugin_info(self) -> dict[str, Any]:
        """The plugin facts put into ``AgentRunnerManifest.metadata["plugin"]``."""
        meta = self.metadata
        return {
            "author": meta.author,
            "name": meta.name,
            "version": meta.version,
            "label": meta.label.root,
            "description": meta.description.root if meta.description is not None else None,
        }


class AgentRunnerMetadata(_YamlSection):
    name: str
    label: I18nObject
    description: I18nObject | None = None

    @field_validator("name")
    @classmethod
    def _check_name(cls, value: str) -> str:
        return validate_id_part(value, "runner name")


class AgentRunnerSpec(_YamlSection):
    config: list[DynamicFormItemSchema] = Field(default_factory=list)
    capabilities: AgentRunnerCapabilities = Field(default_factory=AgentRunnerCapabilities)
    permissions: AgentRunnerPermissions = Field(default_factory=AgentRunnerPermissions)
    context: AgentRunnerContextPolicy = Field(default_factory=AgentRunnerContextPolicy)

    @field_validator("config")
    @classmethod
    def _unique_names(cls, items: list[DynamicFormItemSchema]) -> list[DynamicFormItemSchema]:
        seen: set[str] = set()
        for item in items:
            if item.name in seen:
                raise ValueError(f"config item name {item.name!r} appears twice")
            seen.add(item.name)
        return items


class AgentRunnerComponentManifest(_TolerantManifest):
    """``components/agent_runner/<runner>.yaml``."""

    api_version: Literal["langbot/v1"] = Field(default="langbot/v1", alias="apiVersion")
    kind: Literal["AgentRunner"]
    metadata: AgentRunnerMetadata
    spec: AgentRunnerSpec = Field(default_factory=AgentRunnerSpec)
    execution: ExecutionSpec

    def runner_id(self, plugin: PluginManifest) -> RunnerId:
        return RunnerId(plugin.metadata.author, plugin.metadata.name, self.metadata.name)

    def to_runner_manifest(self, plugin: PluginManifest) -> AgentRunnerManifest:
        return AgentRunnerManifest(
            id=str(self.runner_id(plugin)),
            name=self.metadata.name,
            label=self.metadata.label,
            description=self.metadata.description,
            capabilities=self.spec.capabilities,
            permissions=self.spec.permissions,
            context=self.spec.context,
            config_schema=self.spec.config,
            metadata={"plugin": plugin.plugin_info()},
        )
