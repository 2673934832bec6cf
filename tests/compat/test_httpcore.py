"""foundation.compat.httpcore against the installed httpx/httpcore and httpx2/httpcore2: a transport opens
its connections through the backend it was given."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

import httpcore
import httpcore2
import httpx
import httpx2
import pytest

from foundation.compat import httpcore as compat
from tests.compat.pins import assert_pinned

URL = "http://compat-check.invalid/"
REFUSAL = "refused by the backend the test gave"


@pytest.mark.parametrize("distribution", sorted(compat.TESTED_VERSIONS))
def test_the_http_libraries_are_the_versions_the_compat_module_was_checked_against(distribution: str) -> None:
    assert_pinned(distribution, checked=compat.TESTED_VERSIONS[distribution], module="foundation/compat/httpcore.py")


class RefusingBackend(httpcore.SyncBackend):
    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        raise httpcore.ConnectError(f"{REFUSAL}: {host}:{port}")


class RefusingAsyncBackend(httpcore.AnyIOBackend):
    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError(f"{REFUSAL}: {host}:{port}")


class RefusingBackend2(httpcore2.SyncBackend):
    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore2.SOCKET_OPTION] | None = None,
    ) -> httpcore2.NetworkStream:
        raise httpcore2.ConnectError(f"{REFUSAL}: {host}:{port}")


class RefusingAsyncBackend2(httpcore2.AnyIOBackend):
    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore2.SOCKET_OPTION] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        raise httpcore2.ConnectError(f"{REFUSAL}: {host}:{port}")


def test_an_httpx_transport_connects_through_the_given_backend() -> None:
    transport = compat.transport_with_backend(httpx.HTTPTransport(), RefusingBackend())
    with httpx.Client(transport=transport) as client, pytest.raises(httpx.ConnectError, match=REFUSAL):
        client.get(URL)


def test_an_async_httpx_transport_connects_through_the_given_backend() -> None:
    async def get() -> None:
        transport = compat.transport_with_backend(httpx.AsyncHTTPTransport(), RefusingAsyncBackend())
        async with httpx.AsyncClient(transport=transport) as client:
            await client.get(URL)

    with pytest.raises(httpx.ConnectError, match=REFUSAL):
        asyncio.run(get())


def test_an_httpx2_transport_connects_through_the_given_backend() -> None:
    transport = compat.transport2_with_backend(httpx2.HTTPTransport(), RefusingBackend2())
    with httpx2.Client(transport=transport) as client, pytest.raises(httpx2.ConnectError, match=REFUSAL):
        client.get(URL)


def test_an_async_httpx2_transport_connects_through_the_given_backend() -> None:
    async def get() -> None:
        transport = compat.transport2_with_backend(httpx2.AsyncHTTPTransport(), RefusingAsyncBackend2())
        async with httpx2.AsyncClient(transport=transport) as client:
            await client.get(URL)

    with pytest.raises(httpx2.ConnectError, match=REFUSAL):
        asyncio.run(get())
