"""English and Simplified Chinese: the catalogues under locale/ are complete and compiled, the admin and the chat
render Chinese for a browser that asks for it (Accept-Language) or after the language switch, and the chat's
script gets its words from the JavaScript catalogue.

The catalogue checks use GNU gettext's own tools (msgattrib, msgcmp, msgfmt; `.ci/run` installs them)."""

from __future__ import annotations

import gettext
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from django.test import Client

from bindings.models import WorkspaceMembership
from tests.factories import UserFactory, WorkspaceFactory

ROOT = Path(settings.BASE_DIR)
CATALOGUES = sorted((ROOT / "locale").glob("*/LC_MESSAGES/*.po"))


def _gettext_tool(name: str) -> str:
    path = shutil.which(name)
    assert path, f"{name} not found: install GNU gettext (Debian's `gettext` package)"
    return path


def _run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, check=False)


def test_the_catalogues_are_there_for_every_language_but_english():
    languages = {code for code, _name in settings.LANGUAGES if code != "en"}
    found = {path.parent.parent.name.lower().replace("_", "-") for path in CATALOGUES}
    assert found == languages
    assert {path.name for path in CATALOGUES} == {"django.po", "djangojs.po"}


@pytest.mark.parametrize("po", CATALOGUES, ids=lambda p: f"{p.parent.parent.name}/{p.name}")
def test_every_string_has_a_translation(po: Path):
    untranslated = _run(_gettext_tool("msgattrib"), "--untranslated", "--no-obsolete", po)
    fuzzy = _run(_gettext_tool("msgattrib"), "--only-fuzzy", "--no-obsolete", po)

    assert untranslated.returncode == 0, untranslated.stderr
    assert fuzzy.returncode == 0, fuzzy.stderr
    assert untranslated.stdout == "", f"untranslated in {po}:\n{untranslated.stdout}"
    assert fuzzy.stdout == "", f"fuzzy (to review) in {po}:\n{fuzzy.stdout}"


@pytest.mark.parametrize("po", CATALOGUES, ids=lambda p: f"{p.parent.parent.name}/{p.name}")
def test_the_committed_mo_is_the_compiled_po(po: Path, tmp_path: Path):
    compiled = tmp_path / "fresh.mo"
    result = _run(_gettext_tool("msgfmt"), "--check", "-o", compiled, po)
    assert result.returncode == 0, result.stderr

    with compiled.open("rb") as fresh, po.with_suffix(".mo").open("rb") as committed:
        expected, actual = gettext.GNUTranslations(fresh), gettext.GNUTranslations(committed)

    # Compared as catalogues, not bytes: msgfmt versions lay the same catalogue out differently.
    assert actual._catalog == expected._catalog, f"{po.with_suffix('.mo')} is stale: run `make messages`"  # type: ignore[attr-defined]


def test_makemessages_finds_nothing_new_and_nothing_gone(tmp_path: Path):
    """`make messages` run now would change no catalogue's strings: every marked string of the templates,
    the Python code and chat.js is in the catalogues, and none they hold has left the source."""
    gathered = _run(sys.executable, ROOT / "scripts" / "messages.py", "--into", tmp_path)
    assert gathered.returncode == 0, gathered.stderr

    for po in CATALOGUES:
        fresh = tmp_path / po.relative_to(ROOT / "locale")
        new = _run(_gettext_tool("msgcmp"), "--use-untranslated", po, fresh)
        gone = _run(_gettext_tool("msgcmp"), "--use-untranslated", fresh, po)
        assert new.returncode == 0, f"strings not yet in {po} (run `make messages`, translate):\n{new.stderr}"
        assert gone.returncode == 0, f"strings in {po} no longer in the source (run `make messages`):\n{gone.stderr}"


# --- pages in Chinese --------------------------------------------------------------------------------


@pytest.fixture
def staff() -> Client:
    client = Client()
    client.force_login(UserFactory.create(username="root", is_staff=True, is_superuser=True))
    return client


@pytest.mark.django_db
def test_the_admin_speaks_chinese_to_a_browser_that_asks(staff: Client):
    english = staff.get("/admin/usage/").content.decode()
    chinese = staff.get("/admin/usage/", HTTP_ACCEPT_LANGUAGE="zh-Hans,zh;q=0.9,en;q=0.5")

    assert "Model usage" in english
    assert "模型用量" not in english
    page = chinese.content.decode()
    assert chinese.headers["Content-Language"] == "zh-hans"
    assert '<html lang="zh-hans"' in page
    assert "模型用量" in page
    assert "此期间没有运行。" in page
    assert "LangBot Host 管理后台" in page  # the site title (the header stays the product's name)
    assert "站点管理" in staff.get("/admin/", HTTP_ACCEPT_LANGUAGE="zh-CN").content.decode()  # Django's own


@pytest.mark.django_db
def test_the_language_switch_sets_the_admin_and_the_chat_to_chinese():
    client = Client()
    login = client.get("/admin/login/").content.decode()
    assert 'action="/i18n/setlang/"' in login
    assert "简体中文" in login

    switched = client.post("/i18n/setlang/", {"language": "zh-hans", "next": "/admin/login/"})

    assert switched.status_code == 302
    assert switched["Location"] == "/admin/login/"
    # The cookie outranks the browser's Accept-Language.
    page = client.get("/admin/login/", HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert "LangBot Host 管理后台" in page
    assert '<option value="zh-hans" selected' in page
    assert "登录调试聊天" in client.get("/chat/login/", HTTP_ACCEPT_LANGUAGE="en").content.decode()

    client.post("/i18n/setlang/", {"language": "en", "next": "/chat/login/"})
    assert "Sign in to the debug chat" in client.get("/chat/login/").content.decode()


@pytest.mark.django_db
def test_the_chat_page_and_its_script_catalogue_in_chinese():
    user = UserFactory.create(username="ada")
    WorkspaceMembership.objects.create(
        workspace=WorkspaceFactory.create(), user=user, role=WorkspaceMembership.Role.ADMIN
    )
    client = Client()
    client.force_login(user)
    client.post("/i18n/setlang/", {"language": "zh-hans", "next": "/chat/"})

    page = client.get("/chat/").content.decode()
    catalogue = client.get("/jsi18n/")

    assert "发送给" in page
    assert "+ 新会话" in page
    assert "说点什么来开始会话。" in page
    assert "Send to" not in page
    # The catalogue comes before chat.js, which takes its words from it.
    assert page.index('src="/jsi18n/"') < page.index("chat/chat.js")
    assert catalogue.status_code == 200
    script = catalogue.content.decode()
    assert '"connected": "\\u5df2\\u8fde\\u63a5"' in script  # 已连接, chat.js's word (djangojs.po)
    assert "django.gettext = function" in script
    english = Client().get("/jsi18n/", HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert "\\u5df2\\u8fde\\u63a5" not in english


@pytest.mark.django_db
def test_the_chat_login_page_in_chinese_by_accept_language():
    page = Client().get("/chat/login/", HTTP_ACCEPT_LANGUAGE="zh-CN,zh;q=0.9").content.decode()

    assert '<html lang="zh-hans">' in page
    assert "登录调试聊天" in page
    assert "用户名" in page
    assert "密码" in page
    assert "Sign in to the debug chat" not in page
