"""`storage_get/set/delete/list` (docs/state-storage-artifacts.md): bytes (≤ 10 MiB decoded, base64 on the wire) in
the areas `plugin`, `workspace` and `binding`, kept in `transcripts.StorageEntry`.

An area is usable only when the manifest asks for it and the binding's resource policy grants it
(`resources.storage.areas` of the snapshot; `unauthorized` otherwise). Isolation by owner key:
`plugin:{author/name}` (the plugin's own, whichever binding runs it), `binding:{runner}:{binding}`
and `workspace` (shared by every plugin of the workspace). A list returns at most 1000 keys. A set (an
upsert) or a delete made again leaves the same row, so a repeated call cannot apply twice.
"""

from __future__ import annotations

import base64

from hostapi.base import FamilyHandler, HandlerResult, ProxyCall
from langbot_sdk.authorization import storage_owner_key
from langbot_sdk.protocol import (
    Action,
    StorageDeleteResult,
    StorageGetResult,
    StorageListResult,
    StorageSetResult,
    limits,
)
from transcripts.models import StorageEntry
from transcripts.selectors import keys_page


def storage_read(*, workspace_id: int, owner_key: str, key: str) -> bytes | None:
    values = list(
        StorageEntry.objects.filter(workspace_id=workspace_id, owner_key=owner_key, key=key).values_list(
            "value", flat=True
        )[:1]
    )
    return bytes(values[0]) if values else None


def storage_write(*, workspace_id: int, area: str, owner_key: str, key: str, value: bytes, run_id: str | None) -> None:
    """Insert or replace one value in a single upsert."""
    StorageEntry.objects.bulk_create(
        [
            StorageEntry(
                workspace_id=workspace_id,
                area=area,
                owner_key=owner_key,
                key=key,
                value=value,
                size_bytes=len(value),
                updated_by_run=run_id,
            )
        ],
        update_conflicts=True,
        unique_fields=["workspace", "owner_key", "key"],
        update_fields=["value", "size_bytes", "updated_by_run", "updated_at", "area"],
    )


def storage_remove(*, workspace_id: int, owner_key: str, key: str) -> bool:
    deleted, _ = StorageEntry.objects.filter(workspace_id=workspace_id, owner_key=owner_key, key=key).delete()
    return deleted > 0


def storage_keys(*, workspace_id: int, owner_key: str, prefix: str | None, limit: int) -> tuple[list[str], bool]:
    rows = StorageEntry.objects.filter(workspace_id=workspace_id, owner_key=owner_key)
    return keys_page(rows, prefix=prefix, limit=limit, cap=limits.STORAGE_LIST_MAX_KEYS)


def _owner(call: ProxyCall) -> str:
    return storage_owner_key(call.session, call.request.area)


async def storage_get(call: ProxyCall) -> HandlerResult:
    owner = _owner(call)
    value = await call.db(
        storage_read, workspace_id=call.session.scope.workspace_id, owner_key=owner, key=call.request.key
    )
    if value is None:
        return StorageGetResult(found=False).model_dump(mode="json")
    return StorageGetResult(found=True, value_base64=base64.b64encode(value).decode("ascii")).model_dump(mode="json")


async def storage_set(call: ProxyCall) -> HandlerResult:
    owner = _owner(call)
    request = call.request
    # The request model already refused invalid base64 and values over 10 MiB.
    value = base64.b64decode(request.value_base64)
    await call.db(
        storage_write,
        workspace_id=call.session.scope.workspace_id,
        area=str(request.area),
        owner_key=owner,
        key=request.key,
        value=value,
        run_id=call.session.run_id,
    )
    return StorageSetResult(size=len(value)).model_dump(mode="json")


async def storage_delete(call: ProxyCall) -> HandlerResult:
    owner = _owner(call)
    deleted = await call.db(
        storage_remove, workspace_id=call.session.scope.workspace_id, owner_key=owner, key=call.request.key
    )
    return StorageDeleteResult(deleted=deleted).model_dump(mode="json")


async def storage_list(call: ProxyCall) -> HandlerResult:
    owner = _owner(call)
    keys, has_more = await call.db(
        storage_keys,
        workspace_id=call.session.scope.workspace_id,
        owner_key=owner,
        prefix=call.request.prefix,
        limit=call.request.limit,
    )
    return StorageListResult(keys=keys, has_more=has_more).model_dump(mode="json")


HANDLERS: dict[Action, FamilyHandler] = {
    Action.STORAGE_GET: storage_get,
    Action.STORAGE_SET: storage_set,
    Action.STORAGE_DELETE: storage_delete,
    Action.STORAGE_LIST: storage_list,
}
