"""foundation.portal.ThreadPortal: the one event loop in a daemon thread that the runtime link and the MCP
sessions run on."""

from __future__ import annotations

import asyncio
import os
import threading

import pytest

from foundation.portal import ThreadPortal


async def _where() -> tuple[str, bool]:
    await asyncio.sleep(0)
    thread = threading.current_thread()
    return thread.name, thread.daemon


def test_a_coroutine_from_sync_code_runs_on_the_portal_thread_started_on_first_use() -> None:
    portal = ThreadPortal(name="test-portal")
    assert not portal.running()
    try:
        assert portal.run_sync(_where(), timeout=5) == ("test-portal", True)
        assert portal.running()
    finally:
        portal.stop()


def test_a_wait_that_times_out_cancels_the_coroutine() -> None:
    portal = ThreadPortal(name="test-portal")
    cancelled = threading.Event()

    async def forever() -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    try:
        with pytest.raises(TimeoutError):
            portal.run_sync(forever(), timeout=0.2)
        assert cancelled.wait(5)
        assert portal.run_sync(_where(), timeout=5)[0] == "test-portal"  # the loop carries on
    finally:
        portal.stop()


def test_code_on_another_loop_awaits_the_portal_without_blocking_its_loop() -> None:
    portal = ThreadPortal(name="test-portal")

    async def caller() -> tuple[str, int]:
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        ticker = asyncio.create_task(tick())

        async def slow() -> str:
            await asyncio.sleep(0.3)
            return threading.current_thread().name

        try:
            return await portal.run_async(slow(), timeout=5), ticks
        finally:
            ticker.cancel()

    try:
        name, ticks = asyncio.run(caller())
    finally:
        portal.stop()
    assert name == "test-portal"
    assert ticks >= 5


def test_stop_ends_the_loop_and_the_next_use_starts_a_new_one() -> None:
    started: list[object] = []
    portal = ThreadPortal(name="test-portal", on_start=started.append)
    try:
        first = portal.loop
        portal.stop()
        assert not portal.running()
        assert portal.run_sync(_where(), timeout=5)[0] == "test-portal"
        assert portal.loop is not first
        assert len(started) == 2
    finally:
        portal.stop()


def test_a_forked_child_runs_on_a_loop_of_its_own() -> None:
    portal = ThreadPortal(name="test-portal")
    parent_loop = portal.loop
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child has no thread running the parent's loop: handing it work there would hang
        try:
            name, _ = portal.run_sync(_where(), timeout=5)
            os.write(write, f"{name} {portal.loop is not parent_loop}".encode())
        finally:
            os._exit(0)
    try:
        os.close(write)
        with os.fdopen(read) as answer:
            assert answer.read() == "test-portal True"
        assert os.waitpid(pid, 0)[1] == 0
        assert portal.loop is parent_loop  # the parent's loop is untouched
        assert portal.run_sync(_where(), timeout=5)[0] == "test-portal"
    finally:
        portal.stop()
