"""A fake WeCom AI bot (企业微信智能机器人) side: it builds the callbacks WeCom posts to an AI bot's URL — the
JSON message (`msgid`, `aibotid`, `chattype`, `from.userid`, `response_url`, `msgtype` and its content)
sealed with the bot's EncodingAESKey and an empty receive id, posted as `{"encrypt": ...}` with
`msg_signature`, `timestamp`, `nonce` in the query — and the stream polls (`msgtype: stream` with the
stream's id) WeCom repeats until an answer says `finish`; it opens the sealed passive answers
(`{"encrypt", "msgsignature", "timestamp", "nonce"}`), checking their signature. Over HTTP it serves the
`response_url`s it hands out (`POST /cgi-bin/aibot/response?response_code=...`, each usable once, recording
what was posted) and pictures sealed as WeCom seals them (`GET /files/<name>`).
"""

from __future__ import annotations

import base64
import itertools
import json
import struct
import threading
import time
from typing import Any
from urllib.parse import urlencode

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from tests.fakes.platform_http import FakePlatformServer, PlatformHandler
from tests.fakes.wecom_server import ENCODING_AES_KEY, TOKEN, msg_signature, seal, signed_query

AIBOT_ID = "aib-0123456789abcdef"


def open_sealed(encrypted: str, *, key: str = ENCODING_AES_KEY) -> bytes:
    aes_key = base64.b64decode(key + "=")
    decryptor = Cipher(algorithms.AES(aes_key), modes.CBC(aes_key[:16])).decryptor()
    plain = decryptor.update(base64.b64decode(encrypted)) + decryptor.finalize()
    plain = plain[: -plain[-1]]
    (length,) = struct.unpack(">I", plain[16:20])
    assert plain[20 + length :] == b"", "an AI bot's messages carry an empty receive id"
    return plain[20 : 20 + length]


def seal_file(data: bytes, *, key: str = ENCODING_AES_KEY) -> bytes:
    """A picture or file as WeCom serves it to an AI bot: AES-256-CBC, PKCS#7 to 32 bytes."""
    aes_key = base64.b64decode(key + "=")
    pad = 32 - len(data) % 32
    padded = data + bytes([pad]) * pad
    encryptor = Cipher(algorithms.AES(aes_key), modes.CBC(aes_key[:16])).encryptor()
    return encryptor.update(padded) + encryptor.finalize()


class FakeWeComAIBot(FakePlatformServer):
    def __init__(self) -> None:
        super().__init__(AIBotHandler)
        self.lock = threading.Lock()
        self.responses: dict[str, list[dict[str, Any]]] = {}  # response code -> what was posted (once)
        self.files: dict[str, bytes] = {}  # name -> sealed bytes
        self._ids = itertools.count(1)

    def add_file(self, name: str, data: bytes) -> str:
        self.files[name] = seal_file(data)
        return f"{self.origin}/files/{name}"

    def message(
        self,
        text: str | None = "hello",
        *,
        user: str = "ada",
        group: str | None = None,
        msgid: str | None = None,
        msgtype: str = "text",
        content: dict[str, Any] | None = None,
        aibotid: str = AIBOT_ID,
    ) -> dict[str, Any]:
        number = next(self._ids)
        code = f"rc{number:06d}"
        self.responses.setdefault(code, [])
        message: dict[str, Any] = {
            "msgid": msgid or f"msg{number:08d}",
            "aibotid": aibotid,
            "chattype": "group" if group else "single",
            "from": {"userid": user},
            "response_url": f"{self.origin}/cgi-bin/aibot/response?response_code={code}",
            "msgtype": msgtype,
        }
        if group:
            message["chatid"] = group
        if msgtype == "text":
            message["text"] = {"content": text}
        elif content is not None:
            message[msgtype] = content
        return message

    @staticmethod
    def poll(stream_id: str, *, user: str = "ada") -> dict[str, Any]:
        return {
            "msgid": f"poll-{time.monotonic_ns()}",
            "aibotid": AIBOT_ID,
            "chattype": "single",
            "from": {"userid": user},
            "msgtype": "stream",
            "stream": {"id": stream_id},
        }

    @staticmethod
    def callback(plain: dict[str, Any], **sign: Any) -> tuple[bytes, str]:
        """The body and query string WeCom posts: `{"encrypt": ...}`, signed in the query."""
        encrypted = seal(json.dumps(plain, ensure_ascii=False).encode(), receive_id="")
        return json.dumps({"encrypt": encrypted}).encode(), urlencode(signed_query(encrypted, **sign))

    @staticmethod
    def url_check(echo: str, **sign: Any) -> str:
        encrypted = seal(echo.encode(), receive_id="")
        return urlencode({**signed_query(encrypted, **sign), "echostr": encrypted})

    @staticmethod
    def opened(answer: bytes) -> dict[str, Any]:
        """A passive answer, its signature checked and its JSON opened."""
        sealed = json.loads(answer)
        signature = msg_signature(TOKEN, str(sealed["timestamp"]), str(sealed["nonce"]), sealed["encrypt"])
        assert sealed["msgsignature"] == signature, "the answer's signature does not match"
        opened: dict[str, Any] = json.loads(open_sealed(sealed["encrypt"]))
        return opened

    def posted(self, code_of: dict[str, Any]) -> list[dict[str, Any]]:
        code = str(code_of["response_url"]).rsplit("=", 1)[-1]
        with self.lock:
            return list(self.responses.get(code, []))


class AIBotHandler(PlatformHandler):
    fake: FakeWeComAIBot

    def do_GET(self) -> None:  # noqa: N802 (http.server names it)
        name = self.path_only.removeprefix("/files/")
        data = self.fake.files.get(name)
        if data is None:
            self.send_bytes(404, "text/plain", b"no such file")
            return
        self.send_bytes(200, "application/octet-stream", data)

    def do_POST(self) -> None:  # noqa: N802 (http.server names it)
        fake = self.fake
        raw = self.read_body()
        if self.path_only != "/cgi-bin/aibot/response":
            self.send_json(404, {"errcode": 404, "errmsg": "not found"})
            return
        code = self.query_params().get("response_code", "")
        with fake.lock:
            posted = fake.responses.get(code)
            if posted is None or posted:
                # Each response URL takes one message.
                self.send_json(200, {"errcode": 60140, "errmsg": "invalid response_code"})
                return
            posted.append(json.loads(raw or b"{}"))
        self.send_json(200, {"errcode": 0, "errmsg": "ok"})
