"""The outbound address guard (foundation.outbound) on its own: which addresses it refuses in every
spelling a tenant could type, that a save-time check resolves names, and that its httpx transports check
the address they connect to at connect time (a name that resolved to a public address when saved and to
loopback later is refused before any byte leaves), and connect when private addresses are allowed."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import httpx2
import pytest

from foundation import outbound

PUBLIC = "93.184.216.34"


class _CountingServer(ThreadingHTTPServer):
    hits = 0


class _Hello(BaseHTTPRequestHandler):
    server: _CountingServer

    def do_GET(self) -> None:
        self.server.hits += 1
        body = b"hello"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def local_server() -> Iterator[_CountingServer]:
    server = _CountingServer(("127.0.0.1", 0), _Hello)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def dns(monkeypatch) -> dict[str, list[str]]:
    """What each made-up host name resolves to; literal addresses resolve as the system resolves them."""
    names: dict[str, list[str]] = {}
    system = outbound.resolve

    def resolve(host: str, port: int) -> list[str]:
        return list(names[host]) if host in names else system(host, port)

    monkeypatch.setattr(outbound, "resolve", resolve)
    return names


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://127.0.0.1:8125/v1", "loopback"),
        ("http://localhost:8125/v1", "loopback"),
        ("http://2130706433:8125/v1", "loopback"),
        ("http://0x7f000001:8125/v1", "loopback"),
        ("http://0177.0.0.1:8125/v1", "loopback"),
        ("http://127.1:8125/v1", "loopback"),
        ("http://[::1]:8125/v1", "loopback"),
        ("http://[::ffff:127.0.0.1]:8125/v1", "127.0.0.1, which is a loopback"),
        ("http://[::127.0.0.1]:8125/v1", "127.0.0.1, which is a loopback"),
        ("http://0.0.0.0:8125/v1", "unspecified"),
        ("http://[::]:8125/v1", "unspecified"),
        ("http://[2002:7f00:1::1]:8125/w", "127.0.0.1, which is a loopback"),
        # Teredo: server 65.54.4.1, client 127.0.0.1 stored inverted (0x80ff:fffe)
        ("http://[2001:0:4136:401:0:0:80ff:fffe]/", "127.0.0.1, which is a loopback"),
        ("http://[64:ff9b::7f00:1]/", "127.0.0.1, which is a loopback"),
        ("http://[64:ff9b:1:7f00:0:100::]/", "127.0.0.1, which is a loopback"),
        ("http://[64:ff9b::a9fe:a9fe]/latest/meta-data/", "169.254.169.254, which is a link-local"),
        ("http://169.254.169.254/latest/meta-data/", "link-local"),
        ("http://[fe80::1]/", "link-local"),
        ("http://10.1.2.3/", "private"),
        ("http://172.16.0.1/", "private"),
        ("http://172.31.255.254/", "private"),
        ("http://192.168.1.1/", "private"),
        ("http://100.64.0.1/", "shared"),
        ("http://[fd00::1]/", "private"),
        ("http://224.0.0.1/", "multicast"),
        ("http://[ff02::1]/", "multicast"),
        ("http://240.0.0.1/", "reserved"),
        ("http://192.0.2.1/", "private"),
    ],
)
def test_every_spelling_of_a_non_public_address_is_refused_at_save_time(url, why):
    refusal = outbound.url_refusal(url, allow_private=False)
    assert refusal is not None
    assert why in refusal
    # the refusal names what would allow it
    assert "LANGBOT_ALLOW_PRIVATE_ADDRESSES" in refusal
    assert "allow_private_addresses" in refusal
    # and an operator's allowance lets the same URL through
    assert outbound.url_refusal(url, allow_private=True) is None


@pytest.mark.parametrize(
    "address",
    [
        PUBLIC,
        "2606:2800:220:1:248:1893:25c8:1946",
        "2002:5db8:d822::1",  # 6to4 of a public address
        "64:ff9b::5db8:d822",  # NAT64 of a public address
        "::ffff:93.184.216.34",
    ],
)
def test_public_addresses_in_any_encoding_are_allowed(address):
    assert outbound.address_refusal(address) is None


def test_a_name_is_judged_by_every_address_it_resolves_to(dns):
    dns["mixed.example.test"] = [PUBLIC, "10.0.0.7"]
    dns["api.example.test"] = [PUBLIC]
    refusal = outbound.url_refusal("https://mixed.example.test/v1", allow_private=False)
    assert refusal is not None
    assert "mixed.example.test resolves to 10.0.0.7" in refusal
    assert outbound.url_refusal("https://api.example.test/v1", allow_private=False) is None


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("ftp://example.com/x", "http"),
        ("file:///etc/passwd", "http"),
        ("http:///nohost", "http"),
        ("https://user:secret@api.example.test/v1", "credentials"),
        ("https://api.example.test:99999/v1", "port"),
        ("https://does-not-exist.invalid/v1", "does not resolve"),
    ],
)
def test_urls_that_are_not_plain_http_to_a_resolvable_host_are_refused(dns, url, why):
    dns["api.example.test"] = [PUBLIC]
    refusal = outbound.url_refusal(url, allow_private=False)
    assert refusal is not None
    assert why in refusal


def test_the_host_wide_switch_and_its_older_names(settings):
    settings.LANGBOT_WEBHOOK_ALLOW_PRIVATE = False
    settings.LANGBOT_ARTIFACT_FETCH_ALLOW_PRIVATE = False
    settings.LANGBOT_ALLOW_PRIVATE_ADDRESSES = False
    assert outbound.host_private_allowed() is False
    for name in (
        "LANGBOT_ALLOW_PRIVATE_ADDRESSES",
        "LANGBOT_WEBHOOK_ALLOW_PRIVATE",
        "LANGBOT_ARTIFACT_FETCH_ALLOW_PRIVATE",
    ):
        setattr(settings, name, True)
        assert outbound.host_private_allowed() is True
        setattr(settings, name, False)


def test_the_transport_refuses_loopback_at_connect_time_and_nothing_is_sent(local_server):
    port = local_server.server_address[1]
    with httpx.Client(transport=outbound.guarded_transport(allow_private=False)) as client:
        with pytest.raises((outbound.AddressRefusedError, httpx.ConnectError), match="loopback"):
            client.get(f"http://127.0.0.1:{port}/")
        with pytest.raises((outbound.AddressRefusedError, httpx.ConnectError), match="loopback"):
            client.get(f"http://2130706433:{port}/")
    assert local_server.hits == 0


def test_a_name_that_rebinds_to_loopback_after_the_save_time_check_is_refused_at_connect(local_server, dns):
    # given a name that resolves to a public address when the URL is saved
    port = local_server.server_address[1]
    dns["rebind.example.test"] = [PUBLIC]
    url = f"http://rebind.example.test:{port}/"
    assert outbound.url_refusal(url, allow_private=False) is None
    # when it resolves to loopback by the time the connection is made
    dns["rebind.example.test"] = ["127.0.0.1"]
    with (
        httpx.Client(transport=outbound.guarded_transport(allow_private=False)) as client,
        pytest.raises((outbound.AddressRefusedError, httpx.ConnectError)) as refused,
    ):
        client.get(url)
    # then the connection is refused, saying why, and the local server saw nothing
    assert "rebind.example.test resolves to 127.0.0.1, which is a loopback address" in str(refused.value)
    assert local_server.hits == 0


def test_httpx_connects_through_the_guard_to_the_address_the_guard_resolved(local_server, dns):
    # Pins the transport's wiring (the connection pool's network backend is the guard's): a made-up name
    # that only the guard's resolver knows reaches the local server, under its own Host header.
    port = local_server.server_address[1]
    dns["local-model.example.test"] = ["127.0.0.1"]
    with httpx.Client(transport=outbound.guarded_transport(allow_private=True)) as client:
        answer = client.get(f"http://local-model.example.test:{port}/")
    assert answer.status_code == 200
    assert answer.text == "hello"
    assert local_server.hits == 1


async def test_the_async_transport_checks_at_connect_time_and_connects_when_allowed(local_server, dns):
    port = local_server.server_address[1]
    dns["local-model.example.test"] = ["127.0.0.1"]
    url = f"http://local-model.example.test:{port}/"
    async with httpx.AsyncClient(transport=outbound.guarded_async_transport(allow_private=False)) as client:
        with pytest.raises((outbound.AddressRefusedError, httpx.ConnectError), match="loopback"):
            await client.get(url)
    assert local_server.hits == 0
    async with httpx.AsyncClient(transport=outbound.guarded_async_transport(allow_private=True)) as client:
        answer = await client.get(url)
    assert answer.text == "hello"
    assert local_server.hits == 1


def test_an_excerpt_of_a_peer_body_is_short_and_printable():
    body = b"\x1b[31mSECRET-START" + b"x" * 5000 + b"\x00\r\nend"
    text = outbound.excerpt(body, limit=50)
    assert len(text) <= 50
    assert not any(character in text for character in "\x1b\x00\r\n")
    assert text.startswith("[31mSECRET-START")
    assert outbound.excerpt("short answer") == "short answer"


def test_httpx2_clients_connect_through_the_guard_too(local_server, dns):
    # Pins the httpx2 transports' wiring, which the openai and mcp SDKs' clients use.
    port = local_server.server_address[1]
    dns["local-model.example.test"] = ["127.0.0.1"]
    url = f"http://local-model.example.test:{port}/"
    with (
        httpx2.Client(transport=outbound.guarded_httpx2_transport(allow_private=False)) as client,
        pytest.raises((outbound.AddressRefusedError, httpx2.ConnectError), match="loopback"),
    ):
        client.get(url)
    assert local_server.hits == 0
    with httpx2.Client(transport=outbound.guarded_httpx2_transport(allow_private=True)) as client:
        assert client.get(url).text == "hello"
    assert local_server.hits == 1


async def test_async_httpx2_clients_connect_through_the_guard_too(local_server, dns):
    port = local_server.server_address[1]
    dns["local-model.example.test"] = ["127.0.0.1"]
    url = f"http://local-model.example.test:{port}/"
    async with httpx2.AsyncClient(transport=outbound.guarded_httpx2_async_transport(allow_private=False)) as client:
        with pytest.raises((outbound.AddressRefusedError, httpx2.ConnectError), match="loopback"):
            await client.get(url)
    assert local_server.hits == 0
    async with httpx2.AsyncClient(transport=outbound.guarded_httpx2_async_transport(allow_private=True)) as client:
        assert (await client.get(url)).text == "hello"
    assert local_server.hits == 1
