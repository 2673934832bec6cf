"""The stdio transport: one JSON frame per line over a pair of pipes.

What belongs here: the line transport over asyncio streams, the runtime side (`open_stdio_transport`,
this process's stdin/stdout) and the host side (`spawn_stdio_transport`, a child process's pipes).

Lines longer than the cap are never held whole: the reader keeps the first few KiB (to recover the
seq_id), drops the rest as it arrives, and raises FrameTooLarge so the Connection can answer and go on.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import Mapping, Sequence
from typing import IO

from .framing import MAX_WIRE_MESSAGE_BYTES, OVERSIZE_HEAD_BYTES
from .transport import FrameTooLarge, TransportClosed

# Frames at most this big are written with a single copy-and-write; bigger ones avoid the copy.
_JOIN_BELOW = 64 * 1024
# Discarding an oversize line in pieces bounds the extra copy StreamReader.readexactly makes.
_DISCARD_CHUNK = 4 * 1024 * 1024


class StdioTransport:
    """Frames as newline-terminated lines over an asyncio StreamReader/StreamWriter pair."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        max_frame_bytes: int = MAX_WIRE_MESSAGE_BYTES,
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._max_frame_bytes = max_frame_bytes
        self._closed = False

    async def send(self, frame: bytes) -> None:
        if self._closed:
            raise TransportClosed("transport is closed")
        writer = self._writer
        if writer.is_closing():
            raise TransportClosed("pipe is closed")
        # No await between the writes of one frame, so frames from concurrent senders cannot interleave.
        if len(frame) < _JOIN_BELOW:
            writer.write(frame + b"\n")
        else:
            writer.write(frame)
            writer.write(b"\n")
        try:
            await writer.drain()
        except (ConnectionError, OSError) as exc:
            raise TransportClosed(str(exc)) from exc

    async def receive(self) -> bytes:
        reader = self._reader
        while True:
            try:
                line = await reader.readuntil(b"\n")
            except asyncio.IncompleteReadError as exc:
                if exc.partial.strip():
                    # A last line without its newline: still a frame; EOF is reported on the next call.
                    return exc.partial
                raise TransportClosed("end of stream") from None
            except asyncio.LimitOverrunError as exc:
                await self._discard_oversize_line(exc.consumed)
            except (ConnectionError, OSError) as exc:
                raise TransportClosed(str(exc)) from exc
            if len(line) > 1 and not line.isspace():
                return line[:-1]

    async def _discard_oversize_line(self, consumed: int) -> None:
        """Drop the current line, keeping its head, then raise FrameTooLarge."""
        reader = self._reader
        try:
            head = await reader.readexactly(min(OVERSIZE_HEAD_BYTES, consumed))
            size = len(head)
            remaining = consumed - len(head)
            while True:
                while remaining > 0:
                    piece = min(remaining, _DISCARD_CHUNK)
                    await reader.readexactly(piece)
                    remaining -= piece
                    size += piece
                try:
                    rest = await reader.readuntil(b"\n")
                    size += len(rest) - 1
                    break
                except asyncio.LimitOverrunError as exc:
                    remaining = exc.consumed
                except asyncio.IncompleteReadError as exc:
                    size += len(exc.partial)
                    break
        except (ConnectionError, OSError) as exc:
            raise TransportClosed(str(exc)) from exc
        raise FrameTooLarge(head, size)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await self._writer.wait_closed()


async def open_stdio_transport(
    *, max_frame_bytes: int = MAX_WIRE_MESSAGE_BYTES, protect_std_streams: bool = True
) -> StdioTransport:
    """The runtime side: frames over this process's stdin/stdout.

    With `protect_std_streams` (the default) the protocol gets private duplicates of fds 0 and 1, fd 1
    is pointed at stderr and fd 0 at /dev/null, and `sys.stdout` becomes `sys.stderr`. A stray `print()`
    or a library writing to stdout then lands in the log instead of corrupting the frame stream.
    """
    loop = asyncio.get_running_loop()
    stdin: IO[bytes]
    stdout: IO[bytes]
    if protect_std_streams:
        sys.stdout.flush()
        in_fd = os.dup(0)
        out_fd = os.dup(1)
        os.dup2(2, 1)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        sys.stdout = sys.stderr
        stdin = os.fdopen(in_fd, "rb", buffering=0)
        stdout = os.fdopen(out_fd, "wb", buffering=0)
    else:
        stdin = sys.stdin.buffer
        stdout = sys.stdout.buffer

    reader = asyncio.StreamReader(limit=max_frame_bytes, loop=loop)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader, loop=loop), stdin)
    write_transport, write_protocol = await loop.connect_write_pipe(
        lambda: asyncio.streams.FlowControlMixin(loop=loop), stdout
    )
    writer = asyncio.StreamWriter(write_transport, write_protocol, None, loop)
    return StdioTransport(reader, writer, max_frame_bytes=max_frame_bytes)


async def spawn_stdio_transport(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    max_frame_bytes: int = MAX_WIRE_MESSAGE_BYTES,
) -> tuple[StdioTransport, asyncio.subprocess.Process]:
    """The host side: start `argv` with stdin/stdout as the frame pipes; stderr is inherited.

    Closing the transport closes the child's stdin (its cue to exit); waiting for or killing the
    process is the caller's job.
    """
    if not argv:
        raise ValueError("argv must name a program")
    process = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=None,
        env=dict(env) if env is not None else None,
        cwd=cwd,
        limit=max_frame_bytes,
    )
    assert process.stdin is not None
    assert process.stdout is not None
    return StdioTransport(process.stdout, process.stdin, max_frame_bytes=max_frame_bytes), process
