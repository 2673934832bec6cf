"""The website chat widget in a real browser, embedded in a page of another origin (a tiny http.server): the
visitor opens the bubble, sends a message, watches the qa-runner's reply stream in, reloads and finds the
conversation again; another visitor (another browser context) sees none of it; a page of an origin the bot does
not allow gets no session. The page's hostile CSS neither hides nor restyles the widget."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from django.core.cache import cache

from bindings.models import Bot
from runners.models import Run
from tests.factories import BotFactory
from webchat.widget import _COUNTER_PREFIX, widget_public_id

# This helper's port range (the brief's): the pages' origins, apart from the host's own.
PORTS = range(42500, 42600)
WIDGET = "[data-langbot-widget]"
HOSTILE_CSS = """
  div { font-size: 3px !important; color: red !important; }
  button { display: none !important; }
  .msg, .bubble, .panel, textarea { display: none !important; visibility: hidden !important; }
  p.msg { color: rgb(0, 128, 0); }
"""
WATCH_REPLIES = """
(() => {
  const root = document.querySelector('[data-langbot-widget]').shadowRoot;
  window.__replyStates = [];
  new MutationObserver(() => {
    for (const el of root.querySelectorAll('.msg.assistant')) {
      window.__replyStates.push({text: el.textContent, streaming: el.classList.contains('streaming')});
    }
  }).observe(root.querySelector('.messages'), {subtree: true, childList: true, characterData: true,
                                                attributes: true, attributeFilter: ['class']});
})();
"""


def _free_port() -> int:
    for port in PORTS:
        with contextlib.suppress(OSError), socket.socket() as sock:
            sock.bind(("127.0.0.1", port))
            return port
    raise RuntimeError("no free port in this test's range")


@pytest.fixture
def page_server() -> Iterator[Callable[[str], str]]:
    """Serve HTML pages on this machine under origins other than the host's; returns `serve(html) -> origin`."""
    servers: list[ThreadingHTTPServer] = []

    def serve(html: str) -> str:
        body = html.encode()

        class Page(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", _free_port()), Page)
        servers.append(server)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        # `localhost`, not the host's `127.0.0.1`: another host name as well as another port.
        return f"http://localhost:{server.server_address[1]}"

    yield serve
    for server in servers:
        server.shutdown()
        server.server_close()


def _page_html(web_server: str, widget_id: str) -> str:
    return f"""<!doctype html><html><head><title>A shop</title><style>{HOSTILE_CSS}</style></head>
<body><h1>A shop</h1><p class="msg">The shop's own paragraph.</p>
<script src="{web_server}/widget.js" data-bot="{widget_id}" data-title="Shop help" async></script></body></html>"""


@pytest.fixture(autouse=True)
def _fresh_address_limits() -> None:
    """The browser's requests all come from 127.0.0.1: forget its counts of earlier runs within the hour."""
    for key, period in (("ip-new:127.0.0.1", 3600), ("ip-min:127.0.0.1", 60)):
        cache.delete(f"{_COUNTER_PREFIX}{key}:{int(time.time() // period)}")


# The widget's host element has no box of its own (its bubble and panel are fixed), so it is waited for as
# attached, not visible.
def _open_widget(page: Any) -> None:
    page.wait_for_selector(WIDGET, state="attached")
    page.click(f"{WIDGET} .bubble")


def test_a_visitor_chats_from_another_sites_page_and_keeps_the_conversation(
    qa_binding, worker, web_server, browser, page_server, screenshots
):
    binding = qa_binding(binding_id="qa-widget", concurrency_policy="parallel")
    bot = BotFactory.create(workspace=binding.workspace, platform=Bot.Platform.WEBUI)
    shop = page_server(_page_html(web_server, widget_public_id(bot)))
    Bot.objects.filter(pk=bot.pk).update(allowed_origins=[shop])

    visitor = browser.new_context(viewport={"width": 1280, "height": 800})
    page = visitor.new_page()
    page.goto(shop)
    _open_widget(page)
    page.wait_for_selector(f"{WIDGET}[data-state=ok][data-history=loaded]", state="attached", timeout=15_000)
    assert page.inner_text(f"{WIDGET} .title") == "Shop help"
    page.evaluate(WATCH_REPLIES)
    page.fill(f"{WIDGET} textarea", "qa:stream:6 hello from the shop")
    page.keyboard.press("Enter")

    page.wait_for_selector(f"{WIDGET} .msg.assistant.done", timeout=30_000)
    expected = "".join(f"chunk{i} " for i in range(6))
    assert page.inner_text(f"{WIDGET} .msg.assistant") == expected
    streamed = [s["text"] for s in page.evaluate("window.__replyStates") if s["streaming"] and s["text"]]
    assert streamed, "the reply never showed streamed text before it completed"
    assert all(expected.startswith(text) for text in streamed)
    # The page's CSS reached neither the bubble nor the messages, and the widget's CSS not the page.
    assert page.is_visible(f"{WIDGET} .bubble")
    assert page.is_visible(f"{WIDGET} .msg.user")
    assert page.eval_on_selector(f"{WIDGET} .msg.user", "el => getComputedStyle(el).fontSize") == "14px"
    assert page.eval_on_selector("p.msg", "el => getComputedStyle(el).color") == "rgb(0, 128, 0)"
    page.screenshot(path=str(screenshots / "widget-streamed.png"))
    run = Run.objects.get(binding_key="qa-widget")
    assert run.conversation_id.startswith(f"widget:{bot.bot_id}:")
    assert run.event is not None
    assert run.event.bot_id == bot.pk

    page.reload()
    _open_widget(page)
    page.wait_for_selector(f"{WIDGET}[data-history=loaded]", state="attached", timeout=15_000)
    assert page.inner_text(f"{WIDGET} .msg.user") == "qa:stream:6 hello from the shop"
    page.wait_for_function(
        f"document.querySelector('{WIDGET}').shadowRoot.querySelectorAll('.msg.assistant').length === 1"
    )
    assert page.inner_text(f"{WIDGET} .msg.assistant").strip() == expected.strip()

    # Another visitor (another browser profile: its own localStorage) starts a conversation of their own.
    stranger = browser.new_context()
    other = stranger.new_page()
    other.goto(shop)
    _open_widget(other)
    other.wait_for_selector(f"{WIDGET}[data-state=ok][data-history=loaded]", state="attached", timeout=15_000)
    assert other.locator(f"{WIDGET} .msg").count() == 0
    assert "hello from the shop" not in other.content()
    tokens = [
        p.evaluate("Object.entries(localStorage).filter(([k]) => k.startsWith('langbot-widget:'))")
        for p in (page, other)
    ]
    assert len(tokens[0]) == len(tokens[1]) == 1
    assert tokens[0][0][1] != tokens[1][0][1]
    visitor.close()
    stranger.close()


def test_a_page_of_an_origin_the_bot_does_not_allow_gets_no_session(
    qa_binding, web_server, browser, page_server, screenshots
):
    binding = qa_binding(binding_id="qa-widget-refused")
    bot = BotFactory.create(
        workspace=binding.workspace, platform=Bot.Platform.WEBUI, allowed_origins=["https://shop.example.com"]
    )
    elsewhere = page_server(_page_html(web_server, widget_public_id(bot)))

    context = browser.new_context()
    page = context.new_page()
    page.goto(elsewhere)
    _open_widget(page)

    page.wait_for_selector(f"{WIDGET}[data-state=unavailable]", state="attached", timeout=15_000)
    assert page.evaluate("Object.keys(localStorage).filter((k) => k.startsWith('langbot-widget:'))") == []
    assert page.locator(f"{WIDGET} .note").count() == 1
    page.screenshot(path=str(screenshots / "widget-refused.png"))
    context.close()
