"""The one client of MCP servers, on the `mcp` SDK: stdio (a local process started with the server's
command, args and env) and streamable HTTP (url, headers); `tools/list` and `tools/call`, every one
bounded by a timeout.

Live sessions are kept per process, keyed by the server's pk and `updated_at`, so a worker does not start
a process (or a handshake) per call, and an edited server gets a new session. The SDK's sessions live in
anyio task groups that must be entered and left by one task on one event loop, while callers come from
sync views, admin actions and the worker's run loop (tests even start a loop per call): so all sessions
live on one event loop of this module, in a daemon thread (`foundation.portal`), and callers hand it
coroutines. After a fork (Celery's prefork pool) the child starts its own loop and sessions; nothing is
inherited.

A session found broken (the process exited, the HTTP endpoint went away) is dropped and reconnected once
within the same call's time; a connection always lists the tools first, and the call reports that
listing (`ToolAnswer.listed_tools`) so the caller can refresh its cached tools. A hung server costs its
caller the timeout, never more: connect, list and call each run under `asyncio.timeout`, and the caller
also waits on the loop's future with a bound.

A stdio server starts only when its command is on the operator's allowlist (`resources.mcp.policy`,
checked again here before every start), in a scratch working directory of its own (a fresh temporary
directory per session, removed when the session closes), with its own `env` over the SDK's small safe set
(HOME, LOGNAME, PATH, SHELL, TERM, USER) and never the host's environment (database URL, secret key,
encryption keys, runtime token). Its stderr goes to a file of the session; when the server fails to start
or its session breaks, the last lines are added to the error (`last_error`), secrets masked.

A streamable-HTTP server is reached only through the outbound guard (`foundation.outbound`'s httpx2
transport: the SDK speaks httpx2): the server's address is checked on every connection, against the
workspace's `allow_private` as computed when the config was read.

Secrets: error texts made here are shown to operators and runners: env and header values (and a URL's
password) are replaced by the mask before they leave this module, and what a peer said is cut to a short,
sanitized excerpt (a server's answer body never comes back whole).
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import json
import logging
import os
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar
from urllib.parse import urlsplit

import httpx2
from anyio.from_thread import BlockingPortal
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import (
    CONNECTION_CLOSED,
    REQUEST_TIMEOUT,
    CallToolResult,
    ContentBlock,
    PaginatedRequestParams,
    TextContent,
)

from foundation.crypto import SECRET_MASK
from foundation.outbound import AddressRefusedError, excerpt, guarded_httpx2_async_transport
from foundation.portal import ThreadPortal
from resources.mcp.policy import mcp_stdio_command_refusal

if TYPE_CHECKING:
    from resources.models import MCPServer

logger = logging.getLogger(__name__)

T = TypeVar("T")

# A session nobody used for this long is closed (a deleted or edited server's, in a process that never
# hears of the change); the reaper looks every REAP_EVERY_SECONDS.
IDLE_SECONDS = 600.0
REAP_EVERY_SECONDS = 30.0
# How much longer than an operation's own timeout its caller waits for the loop's answer: the operation
# bounds itself, this only catches a loop that is stuck.
CALLER_GRACE_SECONDS = 5.0
# A paginating server that never stops cannot hold a listing forever.
MAX_TOOL_PAGES = 50
# How long a session's shutdown (closing stdin, then SIGTERM/SIGKILL in the SDK) may take.
CLOSE_SECONDS = 6.0
# What of a stdio server's stderr an error shows: its last lines, at most this many characters.
STDERR_TAIL_CHARS = 1500
STDERR_TAIL_LINES = 20
# How much of what a peer said (an error's message) an error shows.
PEER_TEXT_CHARS = 300


@dataclass(frozen=True)
class MCPServerConfig:
    """What a connection needs of an `MCPServer` row, read once on the caller's side: the loop thread
    never touches the ORM."""

    pk: int
    version: str
    server_id: str
    transport: str
    command: str = ""
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict, hash=False)
    url: str = ""
    headers: dict[str, str] = field(default_factory=dict, hash=False)
    timeout_seconds: float = 30.0
    allow_private: bool = False

    @classmethod
    def of(cls, server: MCPServer) -> MCPServerConfig:
        """The config of a server row; reads its workspace (select it with the row in async code)."""
        from bindings.selectors import workspace_private_addresses_allowed

        return cls(
            pk=server.pk,
            version=server.updated_at.isoformat() if server.updated_at else "",
            server_id=server.server_id,
            transport=server.transport,
            command=server.command,
            args=tuple(str(arg) for arg in server.args or []),
            env={str(k): str(v) for k, v in (server.env or {}).items()},
            url=server.url,
            headers={str(k): str(v) for k, v in (server.headers or {}).items()},
            timeout_seconds=float(server.timeout_seconds),
            allow_private=workspace_private_addresses_allowed(workspace=server.workspace),
        )

    def redacted(self, text: str) -> str:
        """`text` with every env and header value (and the URL's password) replaced by the mask."""
        secrets = [*self.env.values(), *self.headers.values()]
        password = urlsplit(self.url).password if self.url else None
        if password:
            secrets.append(password)
        # Longest first, so a secret containing another is masked whole.
        for secret in sorted(secrets, key=len, reverse=True):
            if len(secret) >= 4:
                text = text.replace(secret, SECRET_MASK)
        return text


@dataclass(frozen=True)
class RemoteTool:
    """A tool as the server lists it."""

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True)
class ToolAnswer:
    """A `tools/call` answer as text (text blocks joined, other blocks as short markers, structured content
    as JSON when there is no text), whether the tool reported an error, and the server's tool listing when
    this call had to connect (None when it used a live session)."""

    text: str
    is_error: bool
    listed_tools: list[RemoteTool] | None = None


class MCPClientError(Exception):
    """A failed MCP operation. `kind`: `unavailable` (could not connect, or the connection broke),
    `timeout` (no answer in time), `refused` (the server answered with a protocol error, `code`).
    `connecting`: it failed while connecting, i.e. the server as a whole is failing. The message is
    already redacted."""

    def __init__(
        self,
        kind: Literal["unavailable", "timeout", "refused"],
        message: str,
        *,
        connecting: bool = False,
        code: int | None = None,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.connecting = connecting
        self.code = code


# --- one session ------------------------------------------------------------------------------------


@asynccontextmanager
async def _http_transport(config: MCPServerConfig) -> AsyncIterator[Any]:
    # The SDK leaves a client it was given open: this one is closed here, with the session.
    timeout = httpx2.Timeout(config.timeout_seconds, read=max(config.timeout_seconds, 300.0))
    transport = guarded_httpx2_async_transport(allow_private=config.allow_private)
    async with (
        httpx2.AsyncClient(headers=config.headers, timeout=timeout, transport=transport) as http,
        streamable_http_client(config.url, http_client=http) as streams,
    ):
        yield streams


@dataclass
class _StdioOutput:
    """Where a stdio session's server writes its stderr, and its last lines once the session is over (the
    file goes with the session)."""

    config: MCPServerConfig
    stderr_path: Path | None = None
    final_tail: str | None = None

    def stderr_tail(self) -> str:
        if self.final_tail is not None:
            return self.final_tail
        return _stderr_tail(self.stderr_path, self.config) if self.stderr_path is not None else ""


@asynccontextmanager
async def _stdio_transport(config: MCPServerConfig, output: _StdioOutput) -> AsyncIterator[Any]:
    # One directory per session: the server's working directory (`work`, not the host's) and its stderr
    # file, both gone when the session closes. Opened by name in append mode, the stderr file keeps the
    # server's writes at its end while this side reads it.
    with tempfile.TemporaryDirectory(prefix="langbot-mcp-", ignore_cleanup_errors=True) as session_dir:
        work = Path(session_dir) / "work"
        work.mkdir()
        stderr_path = output.stderr_path = Path(session_dir) / "stderr.log"
        parameters = StdioServerParameters(
            command=config.command, args=list(config.args), env=dict(config.env), cwd=str(work)
        )
        try:
            with stderr_path.open("a+", encoding="utf-8", errors="replace") as errlog:
                async with stdio_client(parameters, errlog=errlog) as streams:
                    yield streams
        finally:
            output.final_tail = _stderr_tail(stderr_path, config)


def _stderr_tail(path: Path, config: MCPServerConfig) -> str:
    try:
        with path.open("rb") as file:
            file.seek(0, os.SEEK_END)
            size = file.tell()
            file.seek(max(size - STDERR_TAIL_CHARS * 4, 0))
            data = file.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    lines = [" ".join(line.split()) for line in data.splitlines()]
    tail = "\n".join(line for line in lines[-STDERR_TAIL_LINES:] if line)
    return config.redacted(tail)[-STDERR_TAIL_CHARS:]


def _client_for(config: MCPServerConfig, output: _StdioOutput) -> Client:
    target: Any = _stdio_transport(config, output) if config.transport == "stdio" else _http_transport(config)
    # No response cache: a refresh must see the server's current tools.
    return Client(target, cache=None)


async def _tools_listed(client: Client) -> list[RemoteTool]:
    tools: list[RemoteTool] = []
    cursor: str | None = None
    for _ in range(MAX_TOOL_PAGES):
        params = PaginatedRequestParams(cursor=cursor) if cursor else None
        page = await client.session.list_tools(params=params)
        tools += [
            RemoteTool(name=tool.name, description=tool.description or "", parameters=dict(tool.input_schema or {}))
            for tool in page.tools
        ]
        cursor = page.next_cursor
        if not cursor:
            break
    return tools


class _Connection:
    """One live session, held open by its own task until `close()`: the SDK's session must be entered
    and left by the same task."""

    def __init__(self, config: MCPServerConfig) -> None:
        self.config = config
        self.client: Client | None = None
        self.tools: list[RemoteTool] = []
        self.ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.broken = False
        self.last_used = time.monotonic()
        self.output = _StdioOutput(config)
        self._stop = asyncio.Event()
        self.task = asyncio.create_task(self._hold(), name=f"mcp:{config.server_id}")

    async def _hold(self) -> None:
        try:
            async with _client_for(self.config, self.output) as client:
                self.tools = await _tools_listed(client)
                self.client = client
                self.ready.set_result(None)
                await self._stop.wait()
        except asyncio.CancelledError:
            self._fail(ConnectionAbortedError("the connection attempt was abandoned"))
            raise
        except BaseException as exc:  # an ExceptionGroup from the SDK's task groups included
            self._fail(exc)
        finally:
            self.broken = True

    def _fail(self, exc: BaseException) -> None:
        if not self.ready.done():
            self.ready.set_exception(exc if isinstance(exc, Exception) else RuntimeError(_described(exc)))
            # Retrieved here so that an attempt nobody awaits any more does not log "never retrieved".
            self.ready.exception()
        elif not self._stop.is_set():
            logger.info(
                "MCP server %s: session ended: %s", self.config.server_id, self.config.redacted(_described(exc))
            )

    def with_stderr(self, message: str) -> str:
        """`message`, followed by the last lines the server wrote to stderr when there are (stdio)."""
        tail = self.output.stderr_tail()
        return f"{message}\nstderr (last lines):\n{tail}" if tail else message

    async def close(self) -> None:
        self.broken = True
        self._stop.set()
        if not self.ready.done():
            self.task.cancel()
        try:
            await asyncio.wait_for(asyncio.shield(self.task), CLOSE_SECONDS)
        except (TimeoutError, asyncio.CancelledError):
            self.task.cancel()
        except Exception:
            pass


def _innermost(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _refused_address(exc: BaseException) -> AddressRefusedError | None:
    """The guard's refusal behind a failure, if that is what it is (httpx2 may wrap it as its cause)."""
    seen: BaseException | None = _innermost(exc)
    for _ in range(5):
        if seen is None:
            return None
        if isinstance(seen, AddressRefusedError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def _described(exc: BaseException) -> str:
    """The innermost cause worth showing: the first leaf of an exception group, an MCP error's message;
    what the peer said cut to a short excerpt."""
    exc = _innermost(exc)
    if isinstance(exc, MCPError):
        return excerpt(exc.message, PEER_TEXT_CHARS)
    if isinstance(exc, httpx2.HTTPStatusError):
        return f"HTTP {exc.response.status_code} from the server"
    text = excerpt(str(exc), PEER_TEXT_CHARS)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class _SessionDeadError(Exception):
    """A kept session found dead before a request was sent on it: the request never left."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


def _lost(exc: BaseException) -> bool:
    if isinstance(exc, MCPError):
        return exc.code == CONNECTION_CLOSED
    return isinstance(exc, OSError | EOFError | httpx2.TransportError | BaseExceptionGroup)


# --- the process's sessions -------------------------------------------------------------------------


class MCPConnections:
    """The sessions of this process and the event loop (`foundation.portal.ThreadPortal`) they live on."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self._connections: dict[int, _Connection] = {}
        self._closing: set[asyncio.Task[None]] = set()
        self._portal = ThreadPortal(name="mcp-connections", on_start=self._loop_started)
        self._portal.portal  # noqa: B018 -- starts the loop (and the reaper) now, not on the first call

    def _loop_started(self, portal: BlockingPortal) -> None:
        portal.start_task_soon(self._reap)

    # Callers -------------------------------------------------------------------------------------

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return self._portal.submit(coro)

    def run_sync(self, coro: Coroutine[Any, Any, T], *, timeout: float) -> T:
        try:
            return self._portal.run_sync(coro, timeout=timeout + CALLER_GRACE_SECONDS)
        except TimeoutError:
            raise MCPClientError("timeout", f"no answer within {timeout:g} s") from None

    async def run_async(self, coro: Coroutine[Any, Any, T], *, timeout: float) -> T:
        try:
            return await self._portal.run_async(coro, timeout=timeout + CALLER_GRACE_SECONDS)
        except TimeoutError:
            raise MCPClientError("timeout", f"no answer within {timeout:g} s") from None

    # On the loop ---------------------------------------------------------------------------------

    async def _connection(self, config: MCPServerConfig, deadline: float) -> tuple[_Connection, bool]:
        """A live session for `config`, connecting when there is none (or the server changed since);
        True when this call connected."""
        current = self._connections.get(config.pk)
        if current is not None and (current.broken or current.config != config):
            await self._drop(current)
            current = None
        if current is None and config.transport == "stdio":
            refusal = mcp_stdio_command_refusal(config.command)
            if refusal is not None:
                raise MCPClientError("refused", f"not started: {refusal}", connecting=True)
        fresh = current is None
        connection = current if current is not None else _Connection(config)
        self._connections[config.pk] = connection
        try:
            async with asyncio.timeout_at(deadline):
                await asyncio.shield(connection.ready)
        except TimeoutError:
            message = connection.with_stderr(
                f"the server did not complete the connection within {config.timeout_seconds:g} s"
            )
            await self._drop(connection)
            raise MCPClientError("timeout", message, connecting=True) from None
        except Exception as exc:
            await self._drop(connection)
            refused = _refused_address(exc)
            if refused is not None:
                raise MCPClientError("refused", f"not connected: {refused}", connecting=True) from None
            message = connection.with_stderr(config.redacted(f"could not connect: {_described(exc)}"))
            raise MCPClientError("unavailable", message, connecting=True) from None
        connection.last_used = time.monotonic()
        return connection, fresh

    async def _drop(self, connection: _Connection, *, wait: bool = False) -> None:
        """Forget a session and close it; in the background unless `wait`: a stdio server that ignores
        its closed stdin takes the SDK seconds to stop, and the caller should not pay them."""
        if self._connections.get(connection.config.pk) is connection:
            del self._connections[connection.config.pk]
        if wait:
            await connection.close()
            return
        task = asyncio.create_task(connection.close())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def _with_session(
        self,
        config: MCPServerConfig,
        timeout: float,
        use: Callable[[_Connection, float, bool], Awaitable[T]],
        *,
        resend: bool,
    ) -> tuple[T, list[RemoteTool] | None]:
        """`use(connection, seconds left, connected now)` on a live session. A session that breaks under the
        operation is dropped; the operation is tried once more on a new one, within the same time, only
        when `resend` (it has no effect on the server: a listing). Otherwise the request may have reached
        the server before the session broke, and sending it again could do its work twice: it fails as
        `unavailable`, its outcome unknown. Returns the listing made when connecting, if this call
        connected."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        listed: list[RemoteTool] | None = None
        for attempt in (1, 2):
            connection, fresh = await self._connection(config, deadline)
            if fresh:
                listed = connection.tools
            try:
                async with asyncio.timeout_at(deadline):
                    result = await use(connection, max(deadline - loop.time(), 0.001), fresh)
            except TimeoutError:
                raise MCPClientError("timeout", f"the server did not answer within {timeout:g} s") from None
            except MCPError as exc:
                if exc.code == REQUEST_TIMEOUT:
                    raise MCPClientError("timeout", f"the server did not answer within {timeout:g} s") from None
                if not _lost(exc):
                    raise MCPClientError("refused", config.redacted(exc.message), code=exc.code) from None
                failure: BaseException = exc
                resendable = resend
            except MCPClientError:
                raise
            except _SessionDeadError as exc:
                # The request never left: safe to send on a new session, whatever `resend` says.
                failure = exc.cause
                resendable = True
            except Exception as exc:
                if not _lost(exc):
                    # An answer the SDK could not accept (a result not matching the tool's output schema,
                    # a malformed message): the server's fault, reported as its refusal.
                    message = config.redacted(f"unusable answer: {_described(exc)}")
                    raise MCPClientError("refused", message) from None
                failure = exc
                resendable = resend
            else:
                connection.last_used = time.monotonic()
                return result, listed
            await self._drop(connection)
            described = config.redacted(_described(failure))
            if not resendable:
                logger.info("MCP server %s: session lost during a call (%s)", config.server_id, described)
                message = (
                    f"the connection to the server broke during the call ({described}); the call may or may not "
                    "have run, so it is not sent again"
                )
                raise MCPClientError("unavailable", connection.with_stderr(message), connecting=False)
            logger.info("MCP server %s: session lost (%s); reconnecting", config.server_id, described)
            if fresh or attempt == 2:
                message = connection.with_stderr(f"the connection to the server broke: {described}")
                raise MCPClientError("unavailable", message, connecting=fresh)
        raise AssertionError("unreachable")

    async def tools_list(self, config: MCPServerConfig, timeout: float) -> list[RemoteTool]:
        async def listing(connection: _Connection, _left: float, fresh: bool) -> list[RemoteTool]:
            # A connection made for this call has just listed; asking again would only double the wait.
            if not fresh:
                assert connection.client is not None
                connection.tools = await _tools_listed(connection.client)
            return connection.tools

        tools, _ = await self._with_session(config, timeout, listing, resend=True)
        return tools

    async def tool_call(
        self, config: MCPServerConfig, name: str, arguments: dict[str, Any], timeout: float
    ) -> ToolAnswer:
        async def calling(connection: _Connection, left: float, fresh: bool) -> CallToolResult:
            assert connection.client is not None
            if not fresh:
                # A kept session may have lost its server since its last use (nothing notices until a
                # request fails). A ping first tells a dead session, on which the call would never leave
                # and may be sent on a new one, from a call that broke after leaving, which is never re-sent.
                # Any answer proves the session alive, a refusal too (some servers do not implement ping).
                try:
                    await connection.client.session.send_ping()
                except Exception as exc:
                    if _lost(exc):
                        raise _SessionDeadError(exc) from exc
                    if not isinstance(exc, MCPError):
                        raise
            answer = await connection.client.session.call_tool(name, arguments, read_timeout_seconds=left)
            if not isinstance(answer, CallToolResult):
                raise MCPClientError("refused", f"the server answered tools/call with a {type(answer).__name__}")
            return answer

        # A call is sent at most once: a session that breaks under it is not retried on a new one.
        answer, listed = await self._with_session(config, timeout, calling, resend=False)
        return ToolAnswer(text=_answer_text(answer), is_error=bool(answer.is_error), listed_tools=listed)

    async def close(self, pk: int | None = None) -> None:
        """Close the session of one server (None: all of them)."""
        chosen = [c for c in self._connections.values() if pk is None or c.config.pk == pk]
        await asyncio.gather(*(self._drop(c, wait=True) for c in chosen), return_exceptions=True)

    async def _reap(self) -> None:
        while True:
            await asyncio.sleep(REAP_EVERY_SECONDS)
            now = time.monotonic()
            idle = [c for c in self._connections.values() if c.broken or now - c.last_used > IDLE_SECONDS]
            for connection in idle:
                await self._drop(connection)


def _answer_text(answer: CallToolResult) -> str:
    parts = [_block_text(block) for block in answer.content]
    if not any(isinstance(block, TextContent) for block in answer.content) and answer.structured_content is not None:
        parts.append(json.dumps(answer.structured_content, ensure_ascii=False))
    return "\n".join(part for part in parts if part)


def _block_text(block: ContentBlock) -> str:
    kind = getattr(block, "type", "")
    if kind == "text":
        return str(getattr(block, "text", ""))
    if kind in ("image", "audio"):
        data = str(getattr(block, "data", ""))
        return f"[{kind} {getattr(block, 'mime_type', '')}, {len(data) * 3 // 4} bytes]"
    if kind == "resource":
        resource = getattr(block, "resource", None)
        text = getattr(resource, "text", None)
        if isinstance(text, str):
            return text
        return f"[resource {getattr(resource, 'uri', '')}]"
    if kind == "resource_link":
        return f"[resource link {getattr(block, 'uri', '')}]"
    return f"[{kind or 'unknown'} content]"


# --- the module's API ------------------------------------------------------------------------------

_lock = threading.Lock()
_connections: MCPConnections | None = None


def mcp_connections() -> MCPConnections:
    """This process's sessions (a forked child makes its own)."""
    global _connections
    with _lock:
        if _connections is None or _connections.pid != os.getpid():
            _connections = MCPConnections()
        return _connections


def mcp_tools_list(config: MCPServerConfig) -> list[RemoteTool]:
    """The server's tools, asked now (connecting if needed), within the server's timeout. Sync callers."""
    connections = mcp_connections()
    timeout = config.timeout_seconds
    return connections.run_sync(connections.tools_list(config, timeout), timeout=timeout)


async def mcp_tool_call(config: MCPServerConfig, *, name: str, arguments: dict[str, Any], timeout: float) -> ToolAnswer:
    """Call the server's tool `name` (its own name) within `timeout` seconds, connect included."""
    connections = mcp_connections()
    return await connections.run_async(connections.tool_call(config, name, arguments, timeout), timeout=timeout)


def mcp_connection_close(pk: int) -> None:
    """Close this process's session of a server (deleted, disabled or edited); quick, never raises."""
    connections = _connections
    if connections is None or connections.pid != os.getpid():
        return
    try:
        connections.run_sync(connections.close(pk), timeout=CLOSE_SECONDS)
    except Exception:  # closing is best effort: the reaper gets whatever is left
        logger.warning("MCP: closing the session of server pk=%s failed", pk, exc_info=True)


def mcp_connections_close_all() -> None:
    """Close every session of this process (stdio servers exit); for shutdown and tests."""
    connections = _connections
    if connections is None or connections.pid != os.getpid():
        return
    try:
        connections.run_sync(connections.close(None), timeout=CLOSE_SECONDS)
    except Exception:
        logger.warning("MCP: closing the sessions failed", exc_info=True)


def live_server_pks() -> Iterable[int]:
    """The pks of the servers this process holds a session of (tests, diagnostics)."""
    connections = _connections
    if connections is None or connections.pid != os.getpid():
        return []
    return list(connections._connections)


atexit.register(mcp_connections_close_all)
