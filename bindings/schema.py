"""OpenAPI for the bindings API: the API-key security scheme, and the pydantic models of
`bindings.*` rendered as OpenAPI 3.0 (drf-spectacular finds both once this module is imported).

Pydantic writes JSON Schema 2020-12, where an optional value is `anyOf: [X, {type: null}]` and an exclusive
bound is a number; OpenAPI 3.0 has no null type and says `nullable: true` instead, and marks an exclusive
bound with a flag beside `minimum`/`maximum`, so those schemas are rewritten.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.drainage import set_override
from drf_spectacular.extensions import OpenApiAuthenticationExtension, OpenApiSerializerExtension
from drf_spectacular.plumbing import ResolvedComponent, build_bearer_security_scheme_object
from pydantic.json_schema import model_json_schema


class ApiKeyAuthenticationScheme(OpenApiAuthenticationExtension):
    target_class = "bindings.authentication.ApiKeyAuthentication"
    name = "workspaceApiKey"

    def get_security_definition(self, auto_schema: Any) -> dict[str, Any]:
        scheme = dict(build_bearer_security_scheme_object(header_name="Authorization", token_prefix="Bearer"))
        scheme["description"] = "A workspace API key (`lbk_...`), from admin or `manage.py create_api_key`."
        return scheme


def openapi30(schema: Any) -> Any:
    """A pydantic JSON Schema with null types expressed as OpenAPI 3.0 `nullable`."""
    if isinstance(schema, list):
        return [openapi30(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    result = dict(schema)
    for keyword in ("anyOf", "oneOf"):
        options = result.get(keyword)
        if isinstance(options, list) and {"type": "null"} in options:
            rest = [option for option in options if option != {"type": "null"}]
            del result[keyword]
            if len(rest) == 1 and "$ref" not in rest[0]:
                result.update(rest[0])
            else:
                result[keyword] = rest
            result["nullable"] = True
    result = {key: openapi30(value) for key, value in result.items()}
    if result.get("type") == "null":
        del result["type"]
        result["nullable"] = True
    if "const" in result:
        result["enum"] = [result.pop("const")]
    # 2020-12 writes an exclusive bound as its number (`gt=0`: `exclusiveMinimum: 0`); 3.0 as a flag beside
    # `minimum`/`maximum`, and schema-driven clients (schemathesis among them) refuse the number.
    for exclusive, bound in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        value = result.get(exclusive)
        if isinstance(value, int | float) and not isinstance(value, bool):
            result[bound] = value
            result[exclusive] = True
    return result


class BindingsPydanticModelExtension(OpenApiSerializerExtension):
    target_class = "pydantic.BaseModel"
    match_subclasses = True
    # Ahead of drf-spectacular's own pydantic extension, which would emit 3.1-only null types.
    priority = 1

    @classmethod
    def _matches(cls, target: Any) -> bool:
        return super()._matches(target) and getattr(target, "__module__", "").startswith("bindings.")

    def get_name(self, auto_schema: Any, direction: str) -> str:
        # Nested models are registered under their names from `$defs` (no class at hand there), so the
        # same model may arrive under two identities; the schemas are equal.
        set_override(self.target, "suppress_collision_warning", True)
        return str(self.target.__name__)

    def map_serializer(self, auto_schema: Any, direction: str) -> dict[str, Any]:
        schema = model_json_schema(self.target, ref_template="#/components/schemas/{model}", mode="serialization")
        for name, sub_schema in schema.pop("$defs", {}).items():
            component = ResolvedComponent(
                name=name, type=ResolvedComponent.SCHEMA, object=name, schema=openapi30(sub_schema)
            )
            auto_schema.registry.register_on_missing(component)
        return dict(openapi30(schema))


_SCOPE_NOTE = (
    "\n\n**Scope:** `{scope}`. An API key narrowed to scopes needs this one; a session needs the role {role} "
    'or above in the workspace (docs/security.md, "Workspace roles and API-key scopes").'
)
_ANY_MEMBER_NOTE = "\n\n**Scope:** none; any member of the workspace, or any key of it."
_STREAM = ("/api/v1/runs/{run_id}/stream", "get", "runs:read")


def scopes_document(result: dict[str, Any], generator: Any, request: Any, public: bool) -> dict[str, Any]:
    """drf-spectacular postprocessing hook: each operation says the scope it uses (`x-required-scope`, the least
    role as `x-least-role`, and a line of its description), from its view's `required_scopes`
    (`bindings.roles`); the key's security scheme lists every scope."""
    from bindings.roles import SCOPES, scope_least_role, view_scope

    def note(operation: dict[str, Any], declared: bool, scope: str | None) -> None:
        if declared and scope is None:
            operation["description"] = (operation.get("description") or "") + _ANY_MEMBER_NOTE
            return
        assert scope is not None
        operation["x-required-scope"] = scope
        operation["x-least-role"] = scope_least_role(scope)
        operation["description"] = (operation.get("description") or "") + _SCOPE_NOTE.format(
            scope=scope, role=scope_least_role(scope)
        )

    paths = result.get("paths", {})
    for path, _regex, method, callback in getattr(generator, "endpoints", None) or []:
        operation = paths.get(path, {}).get(method.lower())
        view = getattr(callback, "cls", None)
        if operation is not None and view is not None:
            note(operation, *view_scope(view, method.upper()))
    stream_path, stream_method, stream_scope = _STREAM
    if stream_method in paths.get(stream_path, {}):
        note(paths[stream_path][stream_method], True, stream_scope)
    scheme = result.get("components", {}).get("securitySchemes", {}).get(ApiKeyAuthenticationScheme.name)
    if scheme is not None:
        listed = ", ".join(f"`{name}` ({scope.role}+: {scope.description})" for name, scope in SCOPES.items())
        scheme["description"] = (
            f"{scheme.get('description', '')} A key made with scopes may use only those; one without, every "
            f"scope of its workspace. Scopes: {listed}."
        )
    return result
