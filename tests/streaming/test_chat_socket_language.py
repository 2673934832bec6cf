"""The chat socket's error frames in the page's language: the language switch's cookie, else the browser's
Accept-Language, as for the page itself; the code stays the same in every language."""

from __future__ import annotations

import pytest
from channels.db import database_sync_to_async

from tests.streaming.conftest import ORIGIN, next_json, open_socket, session_cookie

pytestmark = pytest.mark.django_db(transaction=True)


async def _error_for(member, *headers: tuple[bytes, bytes], cookie_extra: str = "") -> dict:
    user, _workspace = member
    name, cookie = await database_sync_to_async(session_cookie)(user)
    comm, connected, _ = await open_socket(ORIGIN, (name, cookie + cookie_extra.encode()), *headers)
    assert connected
    await comm.send_json_to({"type": "cancel", "run_id": "00000000-0000-0000-0000-000000000000"})
    error = await next_json(comm)
    await comm.send_json_to({"type": "shout"})
    unknown = await next_json(comm)
    await comm.disconnect()
    return {"cancel": error, "unknown": unknown}


async def test_errors_in_chinese_for_a_chinese_browser(member):
    errors = await _error_for(member, (b"accept-language", b"zh-CN,zh;q=0.9"))

    assert errors["cancel"]["code"] == "not_found"
    assert errors["cancel"]["message"] == "此工作区中没有运行 '00000000-0000-0000-0000-000000000000'。"
    assert errors["unknown"]["code"] == "invalid_argument"
    assert errors["unknown"]["message"] == "未知的消息类型；应为 subscribe、message 或 cancel。"


async def test_the_switchs_cookie_outranks_the_browser(member):
    errors = await _error_for(member, (b"accept-language", b"en"), cookie_extra="; django_language=zh-hans")

    assert errors["unknown"]["message"] == "未知的消息类型；应为 subscribe、message 或 cancel。"


async def test_errors_in_english_by_default(member):
    errors = await _error_for(member)

    assert errors["cancel"]["message"] == "No run '00000000-0000-0000-0000-000000000000' in this workspace."
    assert errors["unknown"]["message"] == "Unknown message type; expected subscribe, message or cancel."


async def test_the_storable_and_depth_refusals_in_the_pages_language(member, settings):
    """The two refusals the socket takes from the host's input checks (text the database cannot store, JSON
    nested too deep) come in the page's language too."""
    user, _workspace = member
    name, cookie = await database_sync_to_async(session_cookie)(user)
    comm, connected, _ = await open_socket(ORIGIN, (name, cookie), (b"accept-language", b"zh-CN,zh;q=0.9"))
    assert connected

    await comm.send_json_to({"type": "message", "text": "a\u0000b"})
    unstorable = await next_json(comm)
    depth = settings.LANGBOT_API_JSON_MAX_DEPTH
    await comm.send_to(text_data='{"type": "message", "text": ' + "[" * (depth + 1) + "]" * (depth + 1) + "}")
    too_deep = await next_json(comm)
    await comm.disconnect()

    assert unstorable["code"] == "invalid_argument"
    assert unstorable["details"]["fields"] == {"text": "不能包含 NUL 字符或未配对的代理字符。"}
    assert too_deep["code"] == "invalid_argument"
    assert too_deep["details"]["fields"] == {"text": f"嵌套超过 {depth} 层。"}
