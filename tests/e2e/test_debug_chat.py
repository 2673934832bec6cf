"""The debug chat in a real browser: sign in, stream a qa-runner reply, reload without duplicates; attach
an image and see it reach the runner; see a runner's platform actions (send, edit, react) appear live."""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from django.contrib.auth.hashers import PBKDF2PasswordHasher
from django.db import connection, transaction

from bindings.models import WorkspaceMembership
from runners.actions.delivery import platform_action_deliver
from runners.models import Run
from tests.e2e.conftest import UPLOAD_MAX_BYTES
from tests.factories import UserFactory
from transcripts.models import TranscriptItem

PASSWORD = "streaming-e2e-pw"

# Records every text the reply bubble showed and whether it was still streaming, so the test can see the
# reply grow rather than only its final state.
WATCH_REPLIES = """
window.__replyStates = [];
new MutationObserver(() => {
  for (const el of document.querySelectorAll('.msg.assistant')) {
    const bubble = el.querySelector('.bubble');
    window.__replyStates.push({text: bubble ? bubble.textContent : '', streaming: el.classList.contains('streaming'),
                               done: el.classList.contains('done')});
  }
}).observe(document.getElementById('messages'), {subtree: true, childList: true, characterData: true,
                                                 attributes: true, attributeFilter: ['class']});
"""


def _member_of(workspace):
    # The web process runs with the production hashers, so the password is stored the way it expects.
    user = UserFactory.create(password=PBKDF2PasswordHasher().encode(PASSWORD, "e2esalt1234"))
    WorkspaceMembership.objects.create(workspace=workspace, user=user, role=WorkspaceMembership.Role.ADMIN)
    return user


def _sign_in(page: Any, web_server: str, user: Any) -> None:
    page.goto(f"{web_server}/chat/")
    page.fill("#id_username", user.username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_selector("#conn[data-state=ok]")


def test_a_streamed_reply_grows_completes_and_survives_a_reload(qa_binding, worker, web_server, browser, screenshots):
    binding = qa_binding(binding_id="qa-e2e", concurrency_policy="parallel")
    user = _member_of(binding.workspace)
    page = browser.new_page(viewport={"width": 1280, "height": 800})

    _sign_in(page, web_server, user)
    page.evaluate(WATCH_REPLIES)
    page.select_option("#target", f"binding:{binding.binding_id}")
    page.fill("#composer-input", "qa:stream:8 hello")
    page.keyboard.press("Enter")

    page.wait_for_selector(".msg.assistant.done", timeout=30_000)
    page.wait_for_function("document.querySelector('.msg.assistant .status').textContent === 'completed'")
    expected = "".join(f"chunk{i} " for i in range(8))
    states = page.evaluate("window.__replyStates")
    streamed = [s["text"] for s in states if s["streaming"] and s["text"]]
    assert streamed, "the reply never showed streamed text before it completed"
    assert all(expected.startswith(text) for text in streamed)
    assert page.inner_text(".msg.assistant .bubble") == expected
    assert page.locator(".msg.user").count() == 1
    page.screenshot(path=str(screenshots / "chat-streamed.png"), full_page=True)

    page.reload()
    page.wait_for_selector("#conn[data-state=ok]")
    page.wait_for_selector(".msg.assistant")
    page.wait_for_function("document.querySelectorAll('.msg.user').length >= 1")

    assert [t.strip() for t in page.locator(".msg.user .bubble").all_inner_texts()] == ["qa:stream:8 hello"]
    assert page.locator(".msg.assistant .bubble").all_inner_texts() == [expected]
    page.screenshot(path=str(screenshots / "chat-reloaded.png"), full_page=True)
    page.set_viewport_size({"width": 390, "height": 844})
    page.wait_for_timeout(400)  # the drawers slide out of view
    page.screenshot(path=str(screenshots / "chat-phone.png"))
    page.close()


def _png(width: int, height: int) -> bytes:
    """A small two-colour PNG, big enough to see in a screenshot."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(
        b"\x00" + b"".join(bytes((59, 91, 219) if (x // 20 + y // 20) % 2 else (232, 237, 255)) for x in range(width))
        for y in range(height)
    )
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    body = chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")
    return b"\x89PNG\r\n\x1a\n" + body


def _in_thread(work: Callable[[], Any]) -> Any:
    """Run ORM work that publishes through `async_to_sync` away from Playwright's event loop."""

    def call() -> Any:
        try:
            return work()
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(call).result()


def test_an_attached_image_previews_reaches_the_runner_and_runner_actions_show_live(
    qa_binding, worker, web_server, browser, screenshots
):
    binding = qa_binding(binding_id="qa-e2e-files", concurrency_policy="parallel")
    user = _member_of(binding.workspace)
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    _sign_in(page, web_server, user)
    page.select_option("#target", f"binding:{binding.binding_id}")

    # Given one image and one file above the server's upload limit
    page.set_input_files(
        "#attach",
        files=[
            {"name": "pattern.png", "mimeType": "image/png", "buffer": _png(160, 100)},
            {"name": "huge.bin", "mimeType": "application/octet-stream", "buffer": b"\0" * (UPLOAD_MAX_BYTES + 1)},
        ],
    )
    page.wait_for_selector(".chip.upload.ready")
    page.wait_for_selector(".chip.upload.error")
    assert page.locator(".chip.upload.ready .chip-name").inner_text() == "pattern.png"
    refused = page.locator(".chip.upload.error .chip-note").inner_text()
    assert str(UPLOAD_MAX_BYTES) in refused  # the server's own message, not a generic one
    page.screenshot(path=str(screenshots / "chat-attachments-composer.png"))

    # When the message is sent with the image
    page.fill("#composer-input", "qa:echo_context what is in this picture?")
    page.keyboard.press("Enter")

    # Then the user's bubble previews it, the runner saw it, and the run completes
    image = page.locator(".msg.user .file.image img")
    image.wait_for()
    page.wait_for_function(
        "(() => { const i = document.querySelector('.msg.user .file.image img');"
        " return i && i.complete && i.naturalWidth === 160; })()"
    )
    artifact_id = page.locator(".msg.user .file.image").get_attribute("data-artifact-id")
    assert artifact_id
    assert page.locator(".chip.upload").count() == 0
    page.wait_for_selector(".msg.assistant.done", timeout=30_000)
    page.wait_for_function("document.querySelector('.msg.assistant .status').textContent === 'completed'")
    context = json.loads(page.inner_text(".msg.assistant .bubble"))
    assert [a["artifact_id"] for a in context["input"]["attachments"]] == [artifact_id]

    # When the runner's platform actions are delivered on the web surface
    run_id = page.locator(".msg.assistant").first.get_attribute("data-run-id")

    def act() -> None:
        run = Run.objects.select_related("event", "bot").get(run_id=run_id)
        reply = TranscriptItem.objects.get(run_id=run.run_id, role=TranscriptItem.Role.ASSISTANT)
        asked = TranscriptItem.objects.get(event=run.event, role=TranscriptItem.Role.USER)
        for action, target, payload in [
            ("message.send", {}, {"text": "A second message from the runner."}),
            ("message.edit", {"message_id": str(reply.pk)}, {"text": "A tidier answer."}),
            ("reaction.add", {"message_id": str(asked.pk)}, {"reaction": "✓"}),
        ]:
            with transaction.atomic():
                platform_action_deliver(run=run, action=action, target=target, payload=payload)

    _in_thread(act)

    # Then the page shows them without a reload
    page.wait_for_function("document.querySelectorAll('.msg.assistant').length === 2")
    page.wait_for_function("document.querySelector('.msg.assistant .bubble').textContent === 'A tidier answer.'")
    page.wait_for_selector(".msg.user .reaction")
    assert page.locator(".msg.assistant .bubble").all_inner_texts() == [
        "A tidier answer.", "A second message from the runner.",
    ]  # fmt: skip
    assert page.inner_text(".msg.user .reaction") == "✓"
    page.screenshot(path=str(screenshots / "chat-attachments.png"), full_page=True)

    # And a reload shows the same transcript: the image, the edit, the extra message
    page.reload()
    page.wait_for_selector("#conn[data-state=ok]")
    page.wait_for_function("document.querySelectorAll('.msg.assistant').length === 2")
    assert page.locator(f".msg.user .file.image[data-artifact-id='{artifact_id}'] img").count() == 1
    assert page.locator(".msg.assistant .bubble").all_inner_texts() == [
        "A tidier answer.", "A second message from the runner.",
    ]  # fmt: skip
    page.set_viewport_size({"width": 390, "height": 844})
    page.wait_for_timeout(400)  # the drawers slide out of view
    page.screenshot(path=str(screenshots / "chat-attachments-phone.png"))
    page.click("#toggle-sidebar")
    page.wait_for_timeout(400)
    page.screenshot(path=str(screenshots / "chat-phone-sidebar.png"))
    page.close()
