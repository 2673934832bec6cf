"""A small, fast OpenAI-compatible provider for the model benchmarks: one asyncio process, HTTP/1.1 with
keep-alive, `POST /v1/chat/completions` only.

- Without `"stream": true` it answers one JSON `chat.completion` (content `pong`, usage included).
- With `"stream": true` it answers server-sent events over chunked transfer encoding, as real providers do:
  a first chunk with the role, then one `data: {chunk}` frame per token, a frame with the finish reason, a
  usage-only frame (no choices) when `stream_options.include_usage` is set, and `data: [DONE]`. Each frame
  is its own write. How many tokens and how fast is read from the last message's text:
  `chunks=<n> interval_ms=<ms>` (defaults 20 and 0); with an interval, the first frame also waits one
  interval (a time to first token) and every token after it another one, so 20 ms is 50 chunks/s; with
  none, the frames go out flat out.

Run as `python -m bench._fake_provider [--port N]`: it prints `port <n>` on its first line once it
listens, then serves until ended (SIGTERM/SIGINT).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import signal
import sys
from typing import Any

PARAMETER = re.compile(r"(chunks|interval_ms)=(\d+(?:\.\d+)?)")
CHUNK_ID = "chatcmpl-bench"


def _frame(payload: dict[str, Any] | str) -> bytes:
    """One SSE event as one HTTP chunk (chunked transfer encoding)."""
    data = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
    event = f"data: {data}\n\n".encode()
    return b"%x\r\n%s\r\n" % (len(event), event)


def _chunk(
    delta: dict[str, Any] | None, finish_reason: str | None = None, usage: dict[str, int] | None = None
) -> bytes:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish_reason}]
    body: dict[str, Any] = {"id": CHUNK_ID, "object": "chat.completion.chunk", "created": 1, "model": "bench",
                            "choices": choices}  # fmt: skip
    if usage is not None:
        body["usage"] = usage
    return _frame(body)


# Every token frame is the same bytes: the fake spends its time sending, not encoding.
TOKEN_FRAME = _chunk({"content": "tok "})


def _parameters(body: dict[str, Any]) -> tuple[int, float]:
    messages = body.get("messages") or [{}]
    text = messages[-1].get("content") if isinstance(messages[-1], dict) else ""
    found = dict(PARAMETER.findall(text if isinstance(text, str) else ""))
    return int(float(found.get("chunks", 20))), float(found.get("interval_ms", 0)) / 1000


def _completion() -> bytes:
    return json.dumps(
        {
            "id": CHUNK_ID,
            "object": "chat.completion",
            "created": 1,
            "model": "bench",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "pong"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
        },
        separators=(",", ":"),
    ).encode()


async def _stream(writer: asyncio.StreamWriter, body: dict[str, Any]) -> None:
    chunks, interval = _parameters(body)
    writer.write(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
        b"transfer-encoding: chunked\r\n\r\n"
    )
    if interval:
        await asyncio.sleep(interval)
    writer.write(_chunk({"role": "assistant", "content": ""}))
    await writer.drain()
    for _ in range(chunks):
        if interval:
            await asyncio.sleep(interval)
        writer.write(TOKEN_FRAME)
        await writer.drain()
    writer.write(_chunk({}, finish_reason="stop"))
    if (body.get("stream_options") or {}).get("include_usage"):
        usage = {"prompt_tokens": 5, "completion_tokens": chunks, "total_tokens": 5 + chunks}
        writer.write(_chunk(None, usage=usage))
    writer.write(_frame("[DONE]") + b"0\r\n\r\n")
    await writer.drain()


def _plain(status: str, body: bytes, content_type: str = "application/json") -> bytes:
    head = f"HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {len(body)}\r\n\r\n"
    return head.encode() + body


async def _serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, path, _ = lines[0].split(" ", 2)
            headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
            raw = await reader.readexactly(int(headers.get("content-length") or 0))
            if method != "POST" or path.split("?")[0].rstrip("/") != "/v1/chat/completions":
                error = {"error": {"message": f"no {method} {path} here", "type": "fake", "param": None, "code": None}}
                writer.write(_plain("404 Not Found", json.dumps(error).encode()))
            else:
                body = json.loads(raw or b"{}")
                if body.get("stream"):
                    await _stream(writer, body)
                else:
                    writer.write(_plain("200 OK", _completion()))
            await writer.drain()
            if headers.get("connection", "").lower() == "close":
                break
    except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
        pass
    except asyncio.CancelledError:
        # The server is stopping with this keep-alive connection still open: end it quietly.
        pass
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


async def serve(port: int) -> None:
    server = await asyncio.start_server(_serve, "127.0.0.1", port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"port {server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        await stop.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    asyncio.run(serve(args.port))
    return 0


if __name__ == "__main__":
    sys.exit(main())
