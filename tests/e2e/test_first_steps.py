"""The README's first steps as a new user walks them, in Chromium at a laptop's and a phone's size: sign in
as the seeded admin, send the suggested messages to the chat's default target ("Workspace default", which
the seeded demo binding answers), watch a reply grow, see a tool card, cancel a slow run from the reply
itself, reopen the conversation and find the same picture. Screenshots of the chat and of the admin's runs
list, run detail and binding form go to `var/e2e/first-steps/` (git-ignored) for a reviewer to look at."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import PBKDF2PasswordHasher
from django.core.management import call_command

from bindings.models import AgentBinding
from runtimes.descriptors import runner_descriptors_sync

PASSWORD = "first-steps-pw"
LAPTOP = {"width": 1400, "height": 900}
PHONE = {"width": 390, "height": 844}

# Every distinct text the newest reply bubble showed while its run was still streaming, and whether the
# "thinking" indicator was up before the first word.
WATCH_REPLIES = """
window.__grown = [];
window.__thought = false;
new MutationObserver(() => {
  const replies = document.querySelectorAll('.msg.assistant');
  const el = replies[replies.length - 1];
  if (!el) return;
  const thinking = el.querySelector('.thinking');
  if (thinking && !thinking.hidden) window.__thought = true;
  const text = el.querySelector('.bubble').textContent;
  if (el.classList.contains('streaming') && text && window.__grown[window.__grown.length - 1] !== text) {
    window.__grown.push(text);
  }
}).observe(document.getElementById('messages'), {subtree: true, childList: true, characterData: true,
                                                 attributes: true});
"""

# What a reviewer would compare between the live chat and the reopened one.
PICTURE = """
[...document.querySelectorAll('#messages .msg')].map((el) => ({
  role: [...el.classList].find((c) => ['user', 'assistant', 'system'].includes(c)),
  text: (el.querySelector('.bubble') || {}).textContent || '',
  status: (el.querySelector('.meta .status') || {}).textContent || null,
  run: el.dataset.runId || null,
  tools: [...el.querySelectorAll('.tool-card')].map((c) => c.querySelector('.tool-name').textContent + ':' +
                                                         c.querySelector('.tool-state').textContent),
  error: (el.querySelector('.error-line') || {}).textContent || null,
}))
"""


@pytest.fixture
def demo(transactional_db, qa_report) -> Any:
    """What `make run` prepares: the runner registry from the runtime, then `seed_demo`; the admin's
    password stored the way the web process (production hashers) checks it."""
    runner_descriptors_sync(report=qa_report)
    call_command("seed_demo", stdout=open("/dev/null", "w"))  # noqa: SIM115 - a sink for its report
    user = get_user_model().objects.get(username="admin")
    user.password = PBKDF2PasswordHasher().encode(PASSWORD, "firststeps1")
    user.save(update_fields=["password"])
    return AgentBinding.objects.get(binding_id="demo-qa")


def _send(page: Any, text: str) -> None:
    """Send a message and wait for its run's reply to appear."""
    replies = page.locator(".msg.assistant").count()
    page.fill("#composer-input", text)
    page.keyboard.press("Enter")
    page.wait_for_function("(n) => document.querySelectorAll('.msg.assistant').length > n", arg=replies)


def _newest_reply_status(page: Any, status: str, timeout: float = 20_000) -> None:
    page.wait_for_function(
        "(s) => { const r = document.querySelectorAll('.msg.assistant'); const last = r[r.length - 1];"
        " return last.querySelector('.meta .status').textContent === s; }",
        arg=status,
        timeout=timeout,
    )


@pytest.mark.parametrize("viewport", [LAPTOP, PHONE], ids=["laptop", "phone"])
def test_a_new_user_walks_the_readme_first_steps(demo, worker, web_server, browser, screenshots, viewport):
    shots = screenshots / "first-steps"
    shots.mkdir(exist_ok=True)
    size = "laptop" if viewport == LAPTOP else "phone"
    page = browser.new_page(viewport=viewport)

    # Sign in as the README says, and keep the default target
    page.goto(f"{web_server}/chat/")
    page.fill("#id_username", "admin")
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_selector("#conn[data-state=ok]")
    assert page.input_value("#target") == ""
    assert "demo-qa" in page.inner_text("#target-detail")  # who answers, in full, even on a phone
    assert page.locator("#target-detail").is_visible()
    hint = page.inner_text("#empty")
    assert "qa:type" in hint
    assert "qa:tools" in hint
    page.evaluate(WATCH_REPLIES)

    # A reply typed at a human pace grows over several frames, after a "thinking" indicator
    _send(page, "qa:type:2 hello")
    _newest_reply_status(page, "completed")
    grown = page.evaluate("window.__grown")
    assert len(grown) >= 3, grown
    assert all(later.startswith(earlier) for earlier, later in itertools.pairwise(grown))
    assert page.evaluate("window.__thought")
    assert page.locator("#conn").is_visible()

    # A tool call shows as a card, done
    _send(page, "qa:tools weather")
    _newest_reply_status(page, "completed")
    card = page.locator(".msg.assistant").last.locator(".tool-card")
    assert card.locator(".tool-name").inner_text() == "qa_lookup"
    assert card.locator(".tool-state").inner_text() == "done"
    # the newest text is in view (on a phone the list already scrolls)
    page.wait_for_function(
        "(() => { const m = document.getElementById('messages');"
        " return m.scrollHeight - m.scrollTop - m.clientHeight < 4; })()"
    )

    # A slow run is cancelled from the reply itself (no drawer to open on a phone)
    _send(page, "qa:slow:30 wait")
    page.locator(".msg.assistant").last.locator(".cancel-run").wait_for(state="visible")
    page.locator(".msg.assistant").last.locator(".cancel-run").click()
    _newest_reply_status(page, "cancelled")
    page.locator(".msg.assistant").last.locator(".error-line").wait_for()
    live = page.evaluate(PICTURE)
    assert [m["status"] for m in live if m["role"] == "assistant"] == ["completed", "completed", "cancelled"]
    title = page.inner_text("#chat-title")
    assert title.startswith("qa:type:2 hello ·")
    page.screenshot(path=str(shots / f"chat-live-{size}.png"))

    # Reopened (a fresh load of the conversation's address), the chat shows the same picture
    page.reload()
    page.wait_for_selector("#conn[data-state=ok]")
    page.wait_for_function("document.querySelectorAll('.msg.assistant .error-line').length === 1")
    page.wait_for_function("document.querySelectorAll('.msg.assistant .tool-card').length === 1")
    assert page.evaluate(PICTURE) == live
    assert page.inner_text("#chat-title") == title
    if viewport == LAPTOP:
        assert "cancelled" in page.inner_text("#run-info")  # the side panel shows the last run
    page.screenshot(path=str(shots / f"chat-reopened-{size}.png"))

    if viewport == LAPTOP:
        _admin_screenshots(page, web_server, demo, shots)
    page.close()


def _admin_screenshots(page: Any, web_server: str, binding: AgentBinding, shots: Any) -> None:
    # The chat's session is the admin's too (the seeded user is staff): no second sign-in.
    page.goto(f"{web_server}/admin/runners/run/")
    page.wait_for_selector("#result_list")
    assert page.locator("#result_list tbody tr").count() == 3
    page.screenshot(path=str(shots / "admin-runs.png"))
    page.locator("#result_list tbody tr").first.locator("th a, td a").first.click()
    page.wait_for_selector("#content-main")
    page.screenshot(path=str(shots / "admin-run-detail.png"), full_page=True)
    page.goto(f"{web_server}/admin/bindings/agentbinding/{binding.pk}/change/")
    page.wait_for_selector("#content-main form")
    page.screenshot(path=str(shots / "admin-binding-form.png"), full_page=True)
