#!/usr/bin/env python3
"""Check that plugin code imports only `langbot_sdk`, the standard library and third-party packages.

Plugin directories carry hyphens (`plugins/qa-runner`), so they cannot be import-linter packages; this
walks their Python files with `ast` instead and rejects any import of Django (and the libraries that
only make sense inside the host) or of a host package. A plugin runs in the plugin runtime process,
which has neither Django nor the host's database, so such an import would fail there or leak host
internals into runner code.

Usage: `python scripts/check_plugin_imports.py [PATH ...]` (default: `plugins`). Exits 1 and prints
`file:line: ...` for each forbidden import.
"""

from __future__ import annotations

import argparse
import ast
import sys
import tomllib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _host_packages() -> frozenset[str]:
    """The host's top-level packages: those the import-linter contracts cover (pyproject's `root_packages`,
    so a new app is refused as soon as it is listed there) but the SDK, plus the host-side code that is
    no app: `plugins`, `tests` and `bench`."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    apps = set(config["tool"]["importlinter"]["root_packages"]) - {"langbot_sdk"}
    return frozenset(apps | {"plugins", "tests", "bench"})


HOST_PACKAGES = _host_packages()
# Django and the libraries that exist only to serve the host's web/worker processes.
HOST_FRAMEWORKS = frozenset(
    {
        "django",
        "rest_framework",
        "drf_spectacular",
        "drf_spectacular_sidecar",
        "channels",
        "channels_redis",
        "daphne",
        "celery",
        "storages",
        "environ",
        "whitenoise",
    }
)
FORBIDDEN = HOST_PACKAGES | HOST_FRAMEWORKS
# Calls that import a module named by a string, e.g. importlib.import_module("django.conf").
DYNAMIC_IMPORTERS = frozenset({"import_module", "__import__"})


@dataclass(frozen=True)
class Violation:
    path: Path
    line: int
    module: str

    def __str__(self) -> str:
        top = self.module.split(".")[0]
        kind = "host package" if top in HOST_PACKAGES else "host-only framework"
        return f"{self.path}:{self.line}: plugin imports {self.module!r} ({kind} {top!r})"


def _is_forbidden(module: str) -> bool:
    return module.split(".")[0] in FORBIDDEN


def _imported_modules(tree: ast.AST) -> Iterator[tuple[int, str]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            # Relative imports stay inside the plugin's own directory.
            if node.level == 0 and node.module:
                yield node.lineno, node.module
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            first = node.args[0] if node.args else None
            if name in DYNAMIC_IMPORTERS and isinstance(first, ast.Constant) and isinstance(first.value, str):
                yield node.lineno, first.value


def check_file(path: Path) -> list[Violation]:
    """Return the forbidden imports of one Python file (a syntax error is reported as a failure)."""
    tree = ast.parse(path.read_bytes(), filename=str(path))
    return [Violation(path, line, module) for line, module in _imported_modules(tree) if _is_forbidden(module)]


def python_files(roots: Iterable[Path]) -> Iterator[Path]:
    for root in roots:
        if root.is_file():
            yield root
            continue
        for path in sorted(root.rglob("*.py")):
            if "__pycache__" not in path.parts:
                yield path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("paths", nargs="*", type=Path, default=[Path("plugins")])
    args = parser.parse_args(argv)

    missing = [p for p in args.paths if not p.exists()]
    if missing:
        print(f"check_plugin_imports: no such path: {', '.join(map(str, missing))}", file=sys.stderr)
        return 2

    checked = 0
    problems: list[str] = []
    for path in python_files(args.paths):
        checked += 1
        try:
            problems.extend(str(v) for v in check_file(path))
        except SyntaxError as exc:
            problems.append(f"{path}:{exc.lineno}: cannot parse: {exc.msg}")

    for problem in problems:
        print(problem)
    status = "FAILED" if problems else "ok"
    print(f"check_plugin_imports: {checked} file(s) checked, {len(problems)} problem(s): {status}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
