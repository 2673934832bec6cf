"""MIME sniffing, the SSRF-safe URL fetcher, input attachment registration and runner-created artifacts."""

from __future__ import annotations

import base64

import httpx
import pytest

from artifacts.attachments import AttachmentRefusedError, attachment_register
from artifacts.fetch import FetchRefusedError, url_fetch
from artifacts.models import Artifact
from artifacts.services import artifact_create_from_bytes, artifact_read_bytes
from artifacts.sniff import mime_type_sniff


@pytest.mark.parametrize(
    ("head", "declared", "expected"),
    [
        (b"\x89PNG\r\n\x1a\nrest", "text/plain", "image/png"),
        (b"%PDF-1.7", None, "application/pdf"),
        (b"hello world", None, "text/plain"),
        (b'{"a": 1}', None, "application/json"),
        (b"a,b\n1,2", "text/csv", "text/csv"),
        (b"\x00\x01\x02\x03", "image/png", "image/png"),
        (b"\x00\x01\x02\x03", "text/html", "application/octet-stream"),
        (b"<html></html>", "image/png", "text/plain"),
    ],
)
def test_content_decides_the_mime_type(head, declared, expected):
    assert mime_type_sniff(head, declared) == expected


@pytest.fixture(autouse=True)
def _private_addresses_refused(settings):
    # The test settings allow private addresses host-wide (local fakes); the fetcher's tests need the default.
    settings.LANGBOT_WEBHOOK_ALLOW_PRIVATE = False


def _resolver(address: str):
    return lambda host, port: [address]


def _ok_transport(body: bytes = b"file body", status: int = 200, headers: dict | None = None) -> httpx.MockTransport:
    return httpx.MockTransport(lambda request: httpx.Response(status, content=body, headers=headers or {}))


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "10.1.2.3",
        "192.168.0.1",
        "169.254.169.254",
        "::1",
        "fd00::1",
        "0.0.0.0",
        "2002:7f00:1::1",
        "64:ff9b::a9fe:a9fe",
    ],
)
def test_fetcher_refuses_non_public_addresses_after_resolution(address):
    with pytest.raises(FetchRefusedError, match="non-public"):
        url_fetch("http://files.example/a.png", resolver=_resolver(address), transport=_ok_transport())


def test_fetcher_connects_to_the_checked_address_and_keeps_the_host_header():
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, content=b"ok", headers={"content-type": "text/plain"})

    fetched = url_fetch(
        "http://files.example/dir/a.txt", resolver=_resolver("93.184.216.34"), transport=httpx.MockTransport(handler)
    )
    assert fetched.content == b"ok"
    assert fetched.filename == "a.txt"
    assert seen[0].url.host == "93.184.216.34"
    assert seen[0].headers["host"] == "files.example"


def test_fetcher_checks_every_redirect_hop():
    def handler(request: httpx.Request) -> httpx.Response:
        if request.headers["host"] == "files.example":
            return httpx.Response(302, headers={"location": "http://internal.example/secret"})
        return httpx.Response(200, content=b"secret")

    def resolver(host: str, port: int) -> list[str]:
        return ["93.184.216.34"] if host == "files.example" else ["10.0.0.5"]

    with pytest.raises(FetchRefusedError, match="non-public"):
        url_fetch("http://files.example/a", resolver=resolver, transport=httpx.MockTransport(handler))


def test_fetcher_refuses_other_schemes_and_oversize_bodies():
    with pytest.raises(FetchRefusedError, match="http and https"):
        url_fetch("file:///etc/passwd", resolver=_resolver("93.184.216.34"))
    with pytest.raises(FetchRefusedError, match="limit"):
        url_fetch(
            "http://files.example/big",
            max_bytes=4,
            resolver=_resolver("93.184.216.34"),
            transport=_ok_transport(b"12345"),
        )


@pytest.mark.parametrize("setting", ["LANGBOT_ALLOW_PRIVATE_ADDRESSES", "LANGBOT_ARTIFACT_FETCH_ALLOW_PRIVATE"])
def test_private_addresses_are_allowed_by_the_host_switch_or_its_older_name(settings, setting):
    setattr(settings, setting, True)
    fetched = url_fetch("http://intranet.local/a", resolver=_resolver("10.0.0.5"), transport=_ok_transport())
    assert fetched.content == b"file body"


def test_private_addresses_are_allowed_for_one_fetch_when_the_caller_says_so():
    with pytest.raises(FetchRefusedError, match="LANGBOT_ALLOW_PRIVATE_ADDRESSES"):
        url_fetch("http://intranet.local/a", resolver=_resolver("10.0.0.5"), transport=_ok_transport())
    fetched = url_fetch(
        "http://intranet.local/a", allow_private=True, resolver=_resolver("10.0.0.5"), transport=_ok_transport()
    )
    assert fetched.content == b"file body"


@pytest.mark.django_db
def test_base64_and_data_url_attachments_become_artifacts(workspace):
    png = b"\x89PNG\r\n\x1a\n" + b"\0" * 10
    from_b64 = attachment_register(
        workspace=workspace, attachment={"base64": base64.b64encode(png).decode(), "name": "a.png"}, conversation_id="c"
    )
    data_url = "data:text/plain;base64," + base64.b64encode(b"hello").decode()
    from_url = attachment_register(workspace=workspace, attachment={"data_url": data_url}, conversation_id="c")
    assert from_b64["mime_type"] == "image/png"
    assert from_url["mime_type"] == "text/plain"
    stored = Artifact.objects.get(artifact_id=from_url["artifact_id"])
    assert (stored.source, stored.conversation_id) == ("input", "c")
    assert artifact_read_bytes(artifact=stored) == b"hello"


@pytest.mark.django_db
def test_platform_refs_stay_refs_and_bad_attachments_are_refused(workspace):
    ref = attachment_register(
        workspace=workspace, attachment={"platform_ref": {"file_id": "tg-1"}}, conversation_id="c"
    )
    assert ref["platform_ref"] == {"file_id": "tg-1"}
    assert not Artifact.objects.exists()
    with pytest.raises(AttachmentRefusedError):
        attachment_register(workspace=workspace, attachment={"base64": "not base64!"}, conversation_id="c")
    with pytest.raises(AttachmentRefusedError):
        attachment_register(workspace=workspace, attachment={"url": "http://127.0.0.1/x"}, conversation_id="c")


@pytest.mark.django_db
def test_runner_artifacts_get_the_configured_lifetime(workspace, settings):
    settings.LANGBOT_ARTIFACT_RUNNER_TTL_SECONDS = 3600
    artifact = artifact_create_from_bytes(
        workspace=workspace, data=b"out", name="o.txt", mime_type="", conversation_id="c", source=Artifact.Source.RUNNER
    )
    assert artifact.expires_at is not None
    assert artifact.mime_type == "text/plain"
