"""Command line of the plugin runtime: `python -m langbot_sdk.runtime [--stdio | --listen HOST:PORT]
[--isolation plugin|none]`.

What belongs here: argument parsing, logging set-up (stderr only: in stdio mode stdout is the wire),
loading the plugins and serving host connections until the host goes away or a signal arrives. The
runtime needs no database URL and no host secret; it only ever talks to the host over the wire.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import logging
import os
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from collections.abc import Set as AbstractSet
from typing import Protocol

from langbot_sdk.runtime.loader import load_plugin_paths, load_plugins
from langbot_sdk.runtime.service import DEFAULT_CANCEL_GRACE, RUNTIME_VERSION, RuntimeService
from langbot_sdk.runtime.supervisor import (
    DEFAULT_ISOLATION,
    ISOLATION_ENV,
    ISOLATION_MODES,
    PluginSupervisor,
    plugin_memory_mb,
)
from langbot_sdk.wire import Connection, Transport, open_stdio_transport, serve_websocket

logger = logging.getLogger("langbot_sdk.runtime")

PLUGIN_DIRS_ENV = "LANGBOT_PLUGIN_DIRS"
TOKEN_ENV = "LANGBOT_RUNTIME_TOKEN"
GC_FREEZE_ENV = "LANGBOT_GC_FREEZE"
DEFAULT_PLUGIN_DIR = "plugins"


class _Session(Protocol):
    connection: Connection


class _Service(Protocol):
    """What the serving loops need: RuntimeService (plugins in this process) or PluginSupervisor."""

    cancel_grace: float

    @property
    def sessions(self) -> AbstractSet[_Session]: ...

    async def start(self) -> None: ...

    async def aclose(self) -> None: ...

    async def serve(self, transport: Transport, *, name: str = ...) -> None: ...


def default_plugin_dirs() -> list[str]:
    raw = os.environ.get(PLUGIN_DIRS_ENV, "")
    dirs = [part for part in raw.split(os.pathsep) if part.strip()]
    return dirs or [DEFAULT_PLUGIN_DIR]


def _host_port(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {value!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m langbot_sdk.runtime",
        description="LangBot plugin runtime: loads AgentRunner plugins and serves the host over the wire.",
    )
    parser.add_argument(
        "--plugins-dir",
        action="append",
        dest="plugin_dirs",
        metavar="DIR",
        help=f"plugin directory (repeatable; default: ${PLUGIN_DIRS_ENV}, os.pathsep-separated, "
        f"else {DEFAULT_PLUGIN_DIR!r})",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--stdio", action="store_true", help="serve one host over stdin/stdout (default)")
    mode.add_argument(
        "--listen",
        type=_host_port,
        metavar="HOST:PORT",
        help="serve hosts over WebSocket (port 0 picks a free port; the address is logged to stderr)",
    )
    parser.add_argument(
        "--token",
        default=None,
        help=f"bearer token WebSocket clients must present (default: ${TOKEN_ENV}); --listen refuses to "
        "start without one",
    )
    parser.add_argument(
        "--cancel-grace", type=float, default=DEFAULT_CANCEL_GRACE, metavar="SECONDS",
        help="how long a cancelled or timed-out runner may take to stop before its run is ended without it "
        f"(default {DEFAULT_CANCEL_GRACE:g})",
    )  # fmt: skip
    parser.add_argument(
        "--isolation",
        choices=ISOLATION_MODES,
        default=None,
        help=f"plugin: one process per plugin, each under a memory limit and restarted when it dies; none: "
        f"every plugin in this process (default: ${ISOLATION_ENV}, else {DEFAULT_ISOLATION!r})",
    )
    # Used by the supervisor for its children: load these plugin directories themselves.
    parser.add_argument("--plugin", action="append", dest="plugin_paths", metavar="DIR", help=argparse.SUPPRESS)
    parser.add_argument("--exit-on-memory-error", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING or ERROR (default INFO)")
    return parser


async def _serve_stdio(build_service: Callable[[], _Service]) -> None:
    # The wire takes over stdout before any plugin is imported, so import-time prints go to stderr.
    transport = await open_stdio_transport()
    service = build_service()
    await service.start()
    with _stop_signals() as stop:
        serving = asyncio.create_task(service.serve(transport, name="stdio"))
        stopping = asyncio.create_task(stop.wait())
        await asyncio.wait({serving, stopping}, return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        if not serving.done():
            for session in list(service.sessions):
                await session.connection.close()
            await serving
        await service.aclose()
        await _stop_leftover_tasks(service.cancel_grace)


async def _serve_websocket(build_service: Callable[[], _Service], host: str, port: int, token: str | None) -> None:
    service = build_service()
    await service.start()
    counter = 0

    async def on_transport(transport: Transport) -> None:
        nonlocal counter
        counter += 1
        name = f"ws-{counter}"
        logger.info("host connection %s opened", name)
        try:
            await service.serve(transport, name=name)
        finally:
            logger.info("host connection %s closed", name)

    with _stop_signals() as stop:
        handle = await serve_websocket(host, port, on_transport, token=token)
        # Tests and supervisors parse this line to learn the port when 0 was asked for.
        print(f"langbot runtime listening on ws://{host}:{handle.port}", file=sys.stderr, flush=True)
        try:
            await stop.wait()
        finally:
            for session in list(service.sessions):
                await session.connection.close()
            await handle.close()
            await service.aclose()
        await _stop_leftover_tasks(service.cancel_grace)


async def _stop_leftover_tasks(grace: float) -> None:
    """Cancel what is still running; a runner that ignores cancellation must not keep the process alive."""
    current = asyncio.current_task()
    tasks = [task for task in asyncio.all_tasks() if task is not current]
    for task in tasks:
        task.cancel()
    if not tasks:
        return
    _, stuck = await asyncio.wait(tasks, timeout=grace)
    if stuck:
        logger.warning("%d task(s) ignored cancellation; exiting without them", len(stuck))
        logging.shutdown()
        os._exit(0)


@contextlib.contextmanager
def _stop_signals() -> Iterator[asyncio.Event]:
    """An event that SIGTERM or SIGINT sets while the block runs.

    The handlers go when the block ends, while the loop is still open. Left to `asyncio.run`, they
    outlive the loop's wakeup pipe for a moment. A host that closes the connection and then sends SIGTERM
    (as the host does when it stops a stdio runtime) could hit that moment, and Python then prints
    "Exception ignored when trying to write to the signal wakeup fd" to stderr, into the host's log.
    """
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    installed: list[signal.Signals] = []
    for signum in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signum, stop.set)
            installed.append(signum)
    try:
        yield stop
    finally:
        for signum in installed:
            loop.remove_signal_handler(signum)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    token = args.token if args.token is not None else os.environ.get(TOKEN_ENV) or None
    if args.listen is not None and not token:
        # A listening runtime runs any host's run_agent with the plugins' code: an open port would let
        # anyone who reaches it act as the host. Refused before a plugin is loaded (exit status 2).
        parser.error(
            f"--listen needs a token that hosts must present: pass --token or set {TOKEN_ENV} "
            "(the host uses the same value as its LANGBOT_RUNTIME_TOKEN)"
        )
    logging.basicConfig(
        stream=sys.stderr,
        level=getattr(logging, str(args.log_level).upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    plugin_dirs = args.plugin_dirs or default_plugin_dirs()
    isolation = args.isolation or os.environ.get(ISOLATION_ENV, "").strip().lower() or DEFAULT_ISOLATION
    if isolation not in ISOLATION_MODES:
        parser.error(f"{ISOLATION_ENV} must be one of {', '.join(ISOLATION_MODES)}, not {isolation!r}")
    if args.plugin_paths:
        isolation = "none"  # a supervisor's child: it runs the plugins it was given

    def build_service() -> _Service:
        if isolation == "plugin":
            return PluginSupervisor(
                plugin_dirs,
                cancel_grace=max(0.0, args.cancel_grace),
                memory_mb=plugin_memory_mb(),
                log_level=str(args.log_level).upper(),
            )
        registry = load_plugin_paths(args.plugin_paths) if args.plugin_paths else load_plugins(plugin_dirs)
        failed = sum(1 for report in registry.reports if report.status == "error")
        logger.info(
            "langbot runtime %s: %d runner(s) from %s; %d plugin(s) failed to load",
            RUNTIME_VERSION,
            len(registry.runners),
            os.pathsep.join(map(str, args.plugin_paths or plugin_dirs)),
            failed,
        )
        if os.environ.get(GC_FREEZE_ENV, "true").strip().lower() not in {"0", "false", "no", "off"}:
            # The loaded plugins and their imports live as long as the process: frozen, a full garbage
            # collection no longer walks them (and no longer holds every run's results back meanwhile).
            gc.collect()
            gc.freeze()
        return RuntimeService(
            registry, cancel_grace=max(0.0, args.cancel_grace), exit_on_memory_error=args.exit_on_memory_error
        )

    try:
        if args.listen is not None:
            host, port = args.listen
            asyncio.run(_serve_websocket(build_service, host, port, token))
        else:
            asyncio.run(_serve_stdio(build_service))
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
