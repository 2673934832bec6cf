"""Every page of the admin and the chat in Chromium at a laptop's (1400×900) and a phone's (390×844) size,
screenshotted to `var/e2e/screens/<size>/<name>.png` (git-ignored) for a reviewer, and failing on what a
user would see as broken:

- a list wider than its page at 1400 px (the result table wider than its box, or the page scrolling
  sideways); at 390 px a table may scroll inside its own box, but the page itself must not;
- a cell or read-only value that is raw JSON (an object of more than one key, a list in brackets, `null`)
  or a Python repr (`<… object at 0x…>`, `{'…`);
- in Chinese, visible text that is one of the project catalogue's msgids shown untranslated;
- a console error, an uncaught script error, or a request of the page's own (the host's address) that
  answered 4xx/5xx.

The pages come from the admin site's registry (each model's list, add form and one change form), so a new
admin is covered without touching this file, plus the pages that belong to no model: the dashboard, the
conversations and a conversation, the model usage report, a knowledge base's hit test, the debug chat with
its "Link accounts" panel, the home page and the API docs. Every page is then checked once more in Chinese,
and a `viewer` member of the demo workspace walks the pages their role lets them see; those two passes are
checked, not screenshotted, to keep the test's time down.
"""

from __future__ import annotations

import contextlib
import gettext
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import PBKDF2PasswordHasher
from django.contrib.auth.models import Permission
from django.core.management import call_command
from django.test import RequestFactory
from django.urls import NoReverseMatch, reverse
from django.utils import timezone
from playwright.sync_api import Error as PlaywrightError

from bindings.models import AgentBinding, Workspace, WorkspaceMembership
from bindings.services import api_key_create
from runtimes.descriptors import runner_descriptors_sync
from tests.factories import ModelFactory, UserFactory, WebhookEndpointFactory

PASSWORD = "screens-e2e-pw"
LAPTOP = {"width": 1400, "height": 900}
PHONE = {"width": 390, "height": 844}
SIZES = {"1400": LAPTOP, "390": PHONE}
CATALOGUE = Path(__file__).resolve().parents[2] / "locale" / "zh_Hans" / "LC_MESSAGES" / "django.mo"

# What one page shows that the checks read: widths, the text of every list cell and read-only value, and
# (for the language check) the visible text nodes.
MEASURE = """
(withTexts) => {
  const table = document.querySelector('#result_list');
  const box = table ? table.parentElement : null;
  const cells = [...document.querySelectorAll(
    '#result_list td, #result_list th, .readonly, .console-tables td, .timeline .event-body')]
    .map((el) => el.innerText.trim()).filter((t) => t);
  const texts = [];
  if (withTexts) {
    const skip = new Set(['SCRIPT', 'STYLE', 'TEXTAREA', 'PRE', 'CODE', 'NOSCRIPT', 'OPTION']);
    const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      const text = node.textContent.trim();
      const parent = node.parentElement;
      // The words of the interface, not data: the signed-in user's name, read-only values (JSON keys among
      // them) and code are what the user and the runners wrote. A list's cells are data too, except the
      // labels of choices (a run's status), which the check below tells apart.
      if (!text || !parent || skip.has(parent.tagName)) continue;
      if (parent.closest('pre, code, textarea, [hidden], #user-tools, .readonly, .json-value')) continue;
      if (!parent.getClientRects().length) continue;
      // Also data: the object's name in the breadcrumbs and the subtitle, and the rows of an inline.
      const data = '#result_list tbody, .console-tables tbody, .inline-group tbody, .breadcrumbs, #content > h2';
      texts.push({text, cell: !!parent.closest(data)});
    }
    for (const el of document.querySelectorAll('input[type=submit], input[type=button], [placeholder]')) {
      if (!el.getClientRects().length) continue;
      for (const t of [el.type === 'submit' || el.type === 'button' ? el.value : '', el.getAttribute('placeholder')]) {
        if (t && t.trim()) texts.push({text: t.trim(), cell: false});
      }
    }
  }
  return {
    docWidth: document.documentElement.scrollWidth,
    viewport: window.innerWidth,
    table: box ? {scroll: box.scrollWidth, client: box.clientWidth} : null,
    cells,
    texts,
  };
}
"""

CHAT_READY = "#conn[data-state=ok]"
REPR = re.compile(r"<[^>]* object at 0x[0-9a-f]+>|\{'|\[\{'")


@dataclass
class Findings:
    problems: list[str] = field(default_factory=list)

    def add(self, where: str, what: str) -> None:
        self.problems.append(f"{where}: {what}")


@dataclass(frozen=True)
class Visit:
    name: str
    path: str
    changelist: bool = False
    ready: str = ""  # a selector the page shows once its script has set it up (the chat: connected)


def _raw_data(text: str) -> str | None:
    """Why a cell's text reads as data rather than words, or None."""
    if REPR.search(text):
        return "a Python repr"
    if text == "null":
        return "JSON null"
    if text[:1] in "{[":
        try:
            value = json.loads(text)
        except ValueError:
            return None
        if (isinstance(value, dict) and len(value) > 1) or (isinstance(value, list) and value):
            return "raw JSON"
    return None


def _catalogue_msgids() -> dict[str, str]:
    """The project's msgids a Chinese page should never show as they are, casefolded (the admin capitalises
    labels): those the compiled catalogue translates to something else, with letters, not plural forms
    (whose English singular could be data) and longer than a word of three letters."""
    with CATALOGUE.open("rb") as mo:
        catalogue = gettext.GNUTranslations(mo)._catalog  # type: ignore[attr-defined]
    wanted: dict[str, str] = {}
    for msgid, msgstr in catalogue.items():
        if not isinstance(msgid, str) or "\x04" in msgid or "%(" in msgid or "{" in msgid:
            continue
        msgid = msgid.strip()
        if len(msgid) < 4 or not re.search(r"[A-Za-z]{3}", msgid) or msgstr.strip().casefold() == msgid.casefold():
            continue
        wanted[msgid.casefold()] = msgid
    return wanted


def _pages_of(user: Any) -> list[Visit]:
    """The admin's pages `user` may open: from the registry (list, add form, the first row's change form),
    then the pages that belong to no model."""
    request = RequestFactory().get("/admin/")
    request.user = user
    visits = [Visit("admin-index", reverse("admin:index"))]
    for model, model_admin in sorted(admin.site._registry.items(), key=lambda item: item[0]._meta.label):
        if not model_admin.has_view_permission(request):
            continue
        info = f"admin:{model._meta.app_label}_{model._meta.model_name}"
        slug = f"{model._meta.app_label}-{model._meta.model_name}"
        visits.append(Visit(f"{slug}-list", reverse(f"{info}_changelist"), changelist=True))
        if model_admin.has_add_permission(request):
            visits.append(Visit(f"{slug}-add", reverse(f"{info}_add")))
        first = model_admin.get_queryset(request).order_by("pk").first()
        if first is not None and model_admin.has_view_permission(request, first):
            visits.append(Visit(f"{slug}-change", reverse(f"{info}_change", args=[first.pk])))
    for name, url_name in (("conversations", "admin-conversations"), ("usage", "admin-usage")):
        with contextlib.suppress(NoReverseMatch):  # an app left out of INSTALLED_APPS
            visits.append(Visit(name, reverse(url_name)))
    return visits


def _other_pages(workspace: Workspace) -> list[Visit]:
    from resources.models import KnowledgeBase
    from transcripts.models import TranscriptItem

    visits = []
    conversation = TranscriptItem.objects.filter(workspace=workspace).order_by("pk").first()
    if conversation is not None:
        path = reverse("admin-conversation", args=[workspace.pk, conversation.conversation_id])
        visits.append(Visit("conversation", path))
    kb = KnowledgeBase.objects.filter(workspace=workspace).first()
    if kb is not None:
        path = reverse("admin:resources_knowledgebase_change", args=[kb.pk])
        visits.append(Visit("knowledgebase-hit-test", f"{path}?hit_query=opening+hours"))
    visits += [Visit("home", "/"), Visit("api-docs", "/api/docs/")]
    return visits


def _content(workspace: Workspace, binding: AgentBinding) -> None:
    """Rows for the pages that show nothing without them (the chat makes runs, events and transcripts)."""
    from platforms.alerts.models import Alert, AlertKind, AlertSettings
    from platforms.schedules.models import Schedule
    from resources.models import KnowledgeBase, MCPServer
    from runners.models import Budget

    model = ModelFactory.create(workspace=workspace, provider__workspace=workspace, provider__name="OpenAI")
    KnowledgeBase.objects.create(workspace=workspace, kb_id="handbook", name="Handbook", embedding_model=None)
    MCPServer.objects.create(workspace=workspace, server_id="files", name="Files", command="mcp-files --root /srv")
    WebhookEndpointFactory.create(workspace=workspace, binding=binding)
    Schedule.objects.create(
        workspace=workspace, schedule_id="morning", name="Morning digest", cron="0 9 * * mon-fri", binding=binding
    )
    Budget.objects.create(workspace=workspace, name="Monthly cap", amount="25.00")
    Alert.objects.create(workspace=workspace, kind=next(iter(AlertKind)), subject="demo-bot",
                         raised_at=timezone.now(), details={"failures": 3, "window": 20})  # fmt: skip
    AlertSettings.objects.get_or_create(workspace=workspace)
    api_key_create(workspace=workspace, name="CI", scopes=["events:write", "runs:read"])
    assert model.pk


@pytest.fixture
def demo(transactional_db, qa_report) -> AgentBinding:
    """`make run`'s demo (runner registry, `seed_demo`) with the admin's password stored the way the web
    process checks it."""
    runner_descriptors_sync(report=qa_report)
    call_command("seed_demo", stdout=open("/dev/null", "w"))  # noqa: SIM115 - a sink for its report
    user = get_user_model().objects.get(username="admin")
    user.password = PBKDF2PasswordHasher().encode(PASSWORD, "screens1234")
    user.save(update_fields=["password"])
    binding = AgentBinding.objects.select_related("workspace").get(binding_id="demo-qa")
    assert binding.workspace is not None
    _content(binding.workspace, binding)
    return binding


def _viewer(workspace: Workspace) -> Any:
    """A staff account whose only role is `viewer` in the demo workspace (Django's view permissions on every
    model: the role is what narrows them)."""
    user = UserFactory.create(
        username="vera", is_staff=True, password=PBKDF2PasswordHasher().encode(PASSWORD, "screens5678")
    )
    user.user_permissions.set(Permission.objects.filter(codename__startswith="view_"))
    WorkspaceMembership.objects.create(workspace=workspace, user=user, role="viewer")
    return user


class Screens:
    """One browser context (one signed-in user, one language) visiting pages one after another."""

    def __init__(self, browser: Any, web_server: str, out: Path, findings: Findings, *, language: str = "en"):
        self.web_server = web_server
        self.out = out
        self.findings = findings
        self.language = language
        self.context = browser.new_context(viewport=LAPTOP, locale="zh-CN" if language != "en" else "en-US")
        self.context.add_cookies([{"name": "django_language", "value": language, "url": web_server}])
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.page.on("console", lambda m: self.errors.append(f"console: {m.text}") if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(f"script: {e}"))
        self.page.on("response", self._response)
        self.page.on("requestfailed", self._request_failed)

    def _response(self, response: Any) -> None:
        if response.url.startswith(self.web_server) and response.status >= 400:
            self.errors.append(f"{response.status} {response.url[len(self.web_server) :]}")

    def _request_failed(self, request: Any) -> None:
        if request.url.startswith(self.web_server) and request.failure != "net::ERR_ABORTED":
            self.errors.append(f"failed {request.url[len(self.web_server) :]}: {request.failure}")

    def sign_in(self, username: str) -> None:
        self.page.goto(f"{self.web_server}/admin/login/?next=/admin/")
        self.page.fill("#id_username", username)
        self.page.fill("#id_password", PASSWORD)
        self.page.click("input[type=submit], button[type=submit]")
        self.page.wait_for_url("**/admin/")

    def visit(self, visit: Visit, size: str, *, msgids: dict[str, str] | None = None, screenshot: bool = True) -> None:
        where = f"{visit.name} at {size} px" + (f" ({self.language})" if self.language != "en" else "")
        self.page.set_viewport_size(SIZES[size])
        self.errors.clear()
        response = self.page.goto(f"{self.web_server}{visit.path}", wait_until="load")
        if response is None or response.status >= 400:
            self.findings.add(where, f"answered {response.status if response else 'nothing'}")
            return
        if visit.ready:
            self.page.wait_for_selector(visit.ready)
        self.check(where, size, visit.changelist, msgids)
        if screenshot:
            target = self.out / size / f"{visit.name}.png"
            target.parent.mkdir(parents=True, exist_ok=True)
            self.page.screenshot(path=str(target), full_page=True)

    def check(self, where: str, size: str, changelist: bool, msgids: dict[str, str] | None) -> None:
        try:
            seen = self.page.evaluate(MEASURE, msgids is not None)
        except PlaywrightError:  # the page moved on by itself (a redirect of its own script): measure there
            self.page.wait_for_load_state("load")
            self.findings.add(where, f"the page navigated by itself to {self.page.url}")
            seen = self.page.evaluate(MEASURE, msgids is not None)
        if seen["docWidth"] > seen["viewport"]:
            self.findings.add(where, f"the page scrolls sideways ({seen['docWidth']} px in {seen['viewport']})")
        table = seen["table"]
        if changelist and size == "1400" and table and table["scroll"] > table["client"]:
            self.findings.add(where, f"the list is wider than its box ({table['scroll']} px in {table['client']})")
        for cell in seen["cells"]:
            why = _raw_data(cell)
            if why:
                self.findings.add(where, f"{why} shown: {cell[:80]!r}")
        for seen_text in seen["texts"]:
            text, cell = seen_text["text"], seen_text["cell"]
            key = text.rstrip(":：").strip().casefold()
            if msgids is None or key not in msgids:
                continue
            # In a list's cell only a choice's label counts (written as the catalogue has it, capitalised):
            # a lower-case word there is a name someone gave (a user called "admin").
            if not cell or (text == msgids[key] and text[:1].isupper()):
                self.findings.add(where, f"untranslated: {msgids[key]!r}")
        for error in dict.fromkeys(self.errors):
            self.findings.add(where, error)

    def close(self) -> None:
        self.context.close()


@pytest.mark.timeout(600)
def test_every_page_at_both_sizes(demo, worker, web_server, browser, screenshots):
    out = screenshots / "screens"
    findings = Findings()
    workspace = demo.workspace

    # Conversations, runs and events for the pages to show: two messages through the debug chat.
    screens = Screens(browser, web_server, out, findings)
    screens.sign_in("admin")
    page = screens.page
    page.goto(f"{web_server}/chat/")
    page.wait_for_selector("#conn[data-state=ok]")
    for text in ("qa:tools weather", "qa:type:1 hello"):
        replies = page.locator(".msg.assistant").count()
        page.fill("#composer-input", text)
        page.keyboard.press("Enter")
        page.wait_for_function(
            "(n) => { const r = document.querySelectorAll('.msg.assistant');"
            " return r.length > n && r[r.length - 1].querySelector('.meta .status').textContent === 'completed'; }",
            arg=replies,
            timeout=30_000,
        )

    admin_user = get_user_model().objects.get(username="admin")
    visits = [*_pages_of(admin_user), *_other_pages(workspace), Visit("chat", "/chat/", ready=CHAT_READY)]
    for size in SIZES:
        for visit in visits:
            screens.visit(visit, size)
    screens.close()

    # The same pages in Chinese, once each: what the catalogue translates must not show in English.
    msgids = _catalogue_msgids()
    chinese = Screens(browser, web_server, out, findings, language="zh-hans")
    chinese.sign_in("admin")
    for visit in visits:
        chinese.visit(visit, "1400", msgids=msgids, screenshot=False)  # measured, not shot: time
    chinese.close()

    # A viewer walks what their role shows them.
    viewer = _viewer(workspace)
    theirs = Screens(browser, web_server, out, findings)
    theirs.sign_in(viewer.username)
    for visit in [*_pages_of(viewer), Visit("chat", "/chat/", ready=CHAT_READY)]:
        theirs.visit(Visit(f"viewer-{visit.name}", visit.path, visit.changelist, visit.ready), "1400", screenshot=False)
    theirs.close()

    assert len(visits) > 3 * len(admin.site._registry) // 2
    assert findings.problems == [], "\n".join(findings.problems)


LINK_CODE = re.compile(r"\b([A-Z0-9]{4}-[A-Z0-9]{4})\b")


def _chat_member(workspace: Workspace, username: str) -> Any:
    user = UserFactory.create(username=username, password=PBKDF2PasswordHasher().encode(PASSWORD, f"{username}salt1"))
    WorkspaceMembership.objects.create(workspace=workspace, user=user, role="operator")
    return user


def _chat_sign_in(browser: Any, web_server: str, username: str, viewport: dict[str, int]) -> tuple[Any, list[str]]:
    page = browser.new_page(viewport=viewport)
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{web_server}/chat/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_selector("#conn[data-state=ok]")
    return page, errors


def _host_reply(page: Any, containing: str) -> str:
    page.wait_for_function(
        "(s) => [...document.querySelectorAll('.msg.assistant .bubble')].some((b) => b.textContent.includes(s))",
        arg=containing,
        timeout=20_000,
    )
    return str(page.locator(".msg.assistant .bubble").last.inner_text())


def test_link_accounts_from_the_chat(qa_binding, web_server, browser, screenshots):
    """Two chat accounts of one human become one person through the chat's "Link accounts" dialog: one asks
    for a code, the other enters it (on a phone), and both are then identities of the same person."""
    from people.models import PersonIdentity

    workspace = qa_binding(binding_id="link-chat").workspace
    ann, bob = _chat_member(workspace, "ann"), _chat_member(workspace, "bob")
    out = screenshots / "screens"

    page, errors = _chat_sign_in(browser, web_server, "ann", LAPTOP)
    page.click("#link-accounts")
    assert page.locator("#link-dialog").is_visible()
    page.screenshot(path=str(out / "1400" / "chat-link-dialog.png"))
    page.click("#link-ask")
    assert not page.locator("#link-dialog").is_visible()
    answer = _host_reply(page, "/link ")
    code = LINK_CODE.search(answer)
    assert code, answer
    page.screenshot(path=str(out / "1400" / "chat-link-code.png"))

    phone, phone_errors = _chat_sign_in(browser, web_server, "bob", PHONE)
    phone.click("#link-accounts")
    phone.click("#link-enter")  # nothing typed: the field asks for the code, nothing is sent
    assert phone.locator("#link-dialog").is_visible()
    phone.fill("#link-code", code.group(1).lower())
    phone.keyboard.press("Enter")
    linked = _host_reply(phone, "Linked")
    assert "one person" in linked
    phone.screenshot(path=str(out / "390" / "chat-link-linked.png"))
    assert phone.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]

    identities = PersonIdentity.objects.filter(workspace=workspace, channel="webui")
    persons = {i.actor_id: i.person_id for i in identities}
    assert set(persons) == {f"user:{ann.pk}", f"user:{bob.pk}"}
    assert len(set(persons.values())) == 1, persons
    assert errors == []
    assert phone_errors == []
    page.close()
    phone.close()
