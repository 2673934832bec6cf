"""The debug chat in a real browser: sign in, stream a qa-runner reply, reload without duplicates."""

from __future__ import annotations

from django.contrib.auth.hashers import PBKDF2PasswordHasher

from bindings.models import WorkspaceMembership
from tests.factories import UserFactory

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
    WorkspaceMembership.objects.create(workspace=workspace, user=user)
    return user


def test_a_streamed_reply_grows_completes_and_survives_a_reload(qa_binding, worker, web_server, browser, screenshots):
    binding = qa_binding(binding_id="qa-e2e", concurrency_policy="parallel")
    user = _member_of(binding.workspace)
    page = browser.new_page(viewport={"width": 1280, "height": 800})

    page.goto(f"{web_server}/chat/")
    page.fill("#id_username", user.username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_selector("#conn[data-state=ok]")
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
