#!/usr/bin/env python3
"""`make messages`: gather the host's translatable strings into the catalogues under `locale/` and compile them.

Runs Django's `makemessages` over the host's own packages (templates, Python, the chat's JavaScript) for every
translated language, into `locale/<language>/LC_MESSAGES/django.po` (templates and Python) and `djangojs.po`
(`webchat/static/chat/chat.js`), then `compilemessages` into the `.mo` files the web process reads. The `.mo`
files are committed, so a checkout serves Chinese without gettext installed; `tests/host/test_i18n.py` keeps
them in step with the `.po` files and fails while a string is left untranslated or a new one is not gathered.
Editing the catalogues needs GNU gettext (`msgfmt`, `xgettext`, `msgmerge`; Debian's `gettext` package).

Usage: `python scripts/messages.py [--into DIR]`. With `--into`, the catalogues are written under DIR instead
of `locale/` (and not compiled): the test compares them with the committed ones.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The languages the catalogues are kept for (settings.LANGUAGES less English, the language of the source).
LOCALES = ["zh_Hans"]
# Not the host's own strings: the runner plugins (their manifests carry their own i18n labels), the SDK (a
# library of its own, in English), tests, benchmarks, the docs site, what `make` installs or collects under
# var/, and the catalogues themselves.
IGNORE = ["var", "plugins", "langbot_sdk", "langbot_sdk.egg-info", "tests", "bench", "docs", "scripts", "locale"]
DOMAINS = {"django": ["html", "txt", "py"], "djangojs": ["js"]}


def make_messages(into: Path | None = None) -> None:
    """Update the catalogues (under `into` when given, else `locale/`) from the source, keeping translations."""
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "langbot_host.settings")
    import django
    from django.conf import settings

    django.setup()
    if into is None:
        os.chdir(ROOT)  # makemessages walks the current directory
        _gather()
        # Only locale/: the walk would otherwise compile the catalogues of the packages under .venv and var/.
        from django.core.management import call_command

        call_command("compilemessages", locale=LOCALES, ignore_patterns=[*IGNORE, ".*"], verbosity=0)
        return
    # makemessages writes a file's strings to the catalogue of the nearest enclosing directory that holds
    # `locale/`, so walking the checkout would write into locale/ whatever LOCALE_PATHS says: walk a copy of
    # the sources (without locale/) instead.
    settings.LOCALE_PATHS = [into]
    with tempfile.TemporaryDirectory(prefix="langbot-messages-") as copy:
        shutil.copytree(ROOT, Path(copy) / "src", ignore=shutil.ignore_patterns(*IGNORE, ".*", "__pycache__"))
        os.chdir(Path(copy) / "src")
        _gather()


def _gather() -> None:
    from django.core.management import call_command

    for domain, extensions in DOMAINS.items():
        call_command(
            "makemessages",
            locale=LOCALES,
            domain=domain,
            extensions=extensions,
            ignore_patterns=IGNORE,
            no_obsolete=True,
            # Stable catalogues: no source line numbers (a moved line is no change).
            add_location="file",
            verbosity=0,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--into", type=Path, help="write the catalogues under this directory instead of locale/")
    args = parser.parse_args()
    make_messages(args.into.resolve() if args.into else None)


if __name__ == "__main__":
    main()
