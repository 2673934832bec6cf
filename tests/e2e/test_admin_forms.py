"""The admin's bot and binding forms in a real browser: the bot form shows the credential fields of the
platform picked (and switches with it), and a binding's "try it" box streams a reply through the binding."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.hashers import PBKDF2PasswordHasher

from bindings.models import WorkspaceMembership
from tests.factories import UserFactory

PASSWORD = "admin-forms-e2e-pw"


def _staff_of(workspace: Any) -> Any:
    # The web process runs with the production hashers, so the password is stored the way it expects.
    user = UserFactory.create(
        is_staff=True, is_superuser=True, password=PBKDF2PasswordHasher().encode(PASSWORD, "e2esalt5678")
    )
    WorkspaceMembership.objects.create(workspace=workspace, user=user, role="owner")
    return user


def _admin_sign_in(page: Any, web_server: str, user: Any, next_path: str) -> list[str]:
    """Sign in to the admin and open `next_path`; returns the list the page's console errors go to."""
    errors: list[str] = []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(f"{web_server}/admin/login/?next={next_path}")
    page.fill("#id_username", user.username)
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit], button[type=submit]")
    page.wait_for_url(f"**{next_path}")
    return errors


def _visible(page: Any, name: str) -> bool:
    return bool(page.locator(f'[name="{name}"]').is_visible())


def test_the_bot_form_shows_the_credentials_of_the_platform_picked(qa_binding, web_server, browser, screenshots):
    binding = qa_binding(binding_id="forms-bot")
    user = _staff_of(binding.workspace)
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    errors = _admin_sign_in(page, web_server, user, "/admin/bindings/bot/add/")

    page.select_option("select[name=platform]", "telegram")
    telegram_shown = (_visible(page, "cred__telegram__token"), _visible(page, "cred__telegram__secret_token"))
    slack_hidden = not _visible(page, "cred__slack__bot_token")
    page.screenshot(path=str(screenshots / "admin-bot-telegram.png"), full_page=True)
    page.select_option("select[name=platform]", "slack")

    assert telegram_shown == (True, True)
    assert slack_hidden
    assert _visible(page, "cred__slack__bot_token")
    assert not _visible(page, "cred__telegram__token")
    assert page.get_attribute('[name="cred__slack__bot_token"]', "type") == "password"
    assert errors == []
    page.close()


def test_the_try_it_box_streams_a_reply_through_the_binding(qa_binding, worker, web_server, browser, screenshots):
    binding = qa_binding(binding_id="forms-try", concurrency_policy="parallel")
    user = _staff_of(binding.workspace)
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    errors = _admin_sign_in(page, web_server, user, f"/admin/bindings/agentbinding/{binding.pk}/change/")
    page.evaluate(
        "window.__tryStates = [];"
        "new MutationObserver(() => { for (const el of document.querySelectorAll('.try-reply'))"
        " window.__tryStates.push({text: el.textContent, streaming: el.classList.contains('streaming')}); })"
        ".observe(document.getElementById('try-log'), {subtree: true, childList: true, characterData: true,"
        " attributes: true, attributeFilter: ['class']});"
    )

    page.fill("#try-text", "qa:stream:6 hello")
    page.click("#try-send")
    page.wait_for_selector("#try-binding[data-state=done]", timeout=30_000)
    page.fill("#try-text", "qa:stream:2 again")
    page.keyboard.press("Enter")
    page.wait_for_function("document.querySelectorAll('.try-reply.done').length === 2", timeout=30_000)

    replies = [text.strip() for text in page.locator(".try-reply").all_inner_texts()]
    assert replies == ["chunk0 chunk1 chunk2 chunk3 chunk4 chunk5", "chunk0 chunk1"]
    streamed = [s["text"] for s in page.evaluate("window.__tryStates") if s["streaming"] and s["text"]]
    assert streamed, "the reply never showed streamed text before it completed"
    assert [t.strip() for t in page.locator(".try-user").all_inner_texts()] == [
        "qa:stream:6 hello",
        "qa:stream:2 again",
    ]
    assert page.locator(".try-error").count() == 0
    assert errors == []
    page.screenshot(path=str(screenshots / "admin-binding-try-it.png"), full_page=True)
    page.close()
