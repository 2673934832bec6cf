"""A harness CLI as a child process in its own process group.

The CLI may start its own children (MCP servers, shells, language servers); they join its process group,
so ending the run — timeout, cancellation, or an ordinary exit leaving stragglers — ends them all:
SIGTERM to the group, then SIGKILL after a short grace.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import signal
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path

__all__ = ["HarnessProcess", "kill_process_group"]

STDERR_TAIL_LINES = 40
LINE_LIMIT = 16 * 1024 * 1024
"""Longest stdout line read (a stream-json line holding a large tool result)."""


def kill_process_group(pgid: int, sig: int = signal.SIGKILL) -> bool:
    """Send ``sig`` to the process group; False when the group no longer exists."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False
    return True


class HarnessProcess:
    """``async with HarnessProcess(argv, cwd=..., env=..., stdin_text=...) as process:`` then
    ``async for line in process.lines()``; leaving the block kills the group (whatever the reason)."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        cwd: Path,
        env: Mapping[str, str],
        stdin_text: str | None = None,
        kill_grace: float = 1.0,
    ) -> None:
        self.argv = list(argv)
        self.cwd = cwd
        self.env = dict(env)
        self.stdin_text = stdin_text
        self.kill_grace = kill_grace
        self.process: asyncio.subprocess.Process | None = None
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL_LINES)
        self._stderr_task: asyncio.Task[None] | None = None
        self._stdin_task: asyncio.Task[None] | None = None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    async def start(self) -> None:
        """Start the CLI; raises ``FileNotFoundError`` / ``PermissionError`` when it cannot be executed."""
        self.process = await asyncio.create_subprocess_exec(
            *self.argv,
            cwd=str(self.cwd),
            env=self.env,
            stdin=asyncio.subprocess.PIPE if self.stdin_text is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,  # its own session and process group, led by the CLI
            limit=LINE_LIMIT,
        )
        self._stderr_task = asyncio.create_task(self._read_stderr())
        if self.stdin_text is not None and self.process.stdin is not None:
            # Written beside the reading: a CLI that reads its prompt late (or never) must not block the run.
            self._stdin_task = asyncio.create_task(self._write_stdin(self.process.stdin, self.stdin_text))

    @staticmethod
    async def _write_stdin(stdin: asyncio.StreamWriter, text: str) -> None:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            stdin.write(text.encode())
            await stdin.drain()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            stdin.close()

    async def _read_stderr(self) -> None:
        assert self.process is not None
        assert self.process.stderr is not None
        while True:
            try:
                line = await self.process.stderr.readline()
            except ValueError:  # a line over the limit: skip it
                continue
            if not line:
                return
            self.stderr_tail.append(line.decode("utf-8", errors="replace").rstrip())

    async def lines(self) -> AsyncIterator[str]:
        """The CLI's stdout, line by line, until it closes it."""
        assert self.process is not None
        assert self.process.stdout is not None
        while True:
            try:
                line = await self.process.stdout.readline()
            except ValueError:  # a line over LINE_LIMIT: dropped, reading goes on
                continue
            if not line:
                return
            yield line.decode("utf-8", errors="replace")

    async def wait(self) -> int:
        assert self.process is not None
        code = await self.process.wait()
        if self._stderr_task is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(2):
                    await self._stderr_task
        return code

    def stderr_text(self) -> str:
        return "\n".join(self.stderr_tail)

    async def kill(self) -> None:
        """End the whole process group: SIGTERM, then SIGKILL after the grace."""
        process = self.process
        if process is None:
            return
        pgid = process.pid  # the CLI leads its own group (start_new_session)
        if kill_process_group(pgid, signal.SIGTERM):
            try:
                async with asyncio.timeout(self.kill_grace):
                    await process.wait()
            except TimeoutError:
                pass
            kill_process_group(pgid, signal.SIGKILL)  # the leader or children that ignored SIGTERM
        with contextlib.suppress(ProcessLookupError):
            if process.returncode is None:
                process.kill()
        with contextlib.suppress(Exception):
            async with asyncio.timeout(5):
                await process.wait()
        for task in (self._stderr_task, self._stdin_task):
            if task is not None and not task.done():
                task.cancel()

    async def __aenter__(self) -> HarnessProcess:
        if self.process is None:
            await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        # Shielded: a cancelled run must still take its process group down before it goes.
        await asyncio.shield(self.kill())
