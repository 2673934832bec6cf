"""`python -m langbot_sdk` (also installed as `langbot-sdk`): the runner author's command line.

Commands:
- `new <author>/<name> [--template echo|llm|tools] [--dir PATH]` scaffolds a plugin.
- `dev --host URL --token TOKEN [--dir PATH]` connects the plugin in PATH (default: the current directory)
  to a running host for live development: its runners are registered for the token's workspace, reloaded
  when its files change, and their logs are printed here (`langbot_sdk.dev`).

The plugin runtime the host starts has its own entry point, `python -m langbot_sdk.runtime`.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from langbot_sdk.dev import TOKEN_ENV, dev_main
from langbot_sdk.scaffold import TEMPLATES, ScaffoldError, plugin_scaffold


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m langbot_sdk", description="LangBot runner SDK tools.")
    commands = parser.add_subparsers(dest="command", required=True)
    new = commands.add_parser("new", help="scaffold a plugin with one AgentRunner, a README and a test")
    new.add_argument("plugin", metavar="<author>/<name>", help="the plugin's author and name, e.g. alice/weather")
    new.add_argument("--template", choices=sorted(TEMPLATES), default="echo", help="what the runner does")
    new.add_argument("--dir", type=Path, default=None, help="where to write it (default: ./<name>)")
    dev = commands.add_parser(
        "dev",
        help="connect a plugin directory to a running host: live development runners, reloaded on change",
    )
    dev.add_argument(
        "--host", required=True, help="the host's address, e.g. http://localhost:8000 (or its ws(s):// endpoint)"
    )
    dev.add_argument(
        "--token",
        default=None,
        help=f"a development token created in the host's admin (default: ${TOKEN_ENV})",
    )
    dev.add_argument("--dir", type=Path, default=Path("."), help="the plugin directory (default: .)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "dev":
        token = args.token or os.environ.get(TOKEN_ENV, "").strip()
        if not token:
            parser.error(f"dev needs a development token: pass --token or set {TOKEN_ENV}")
        return dev_main(host=args.host, token=token, directory=args.dir)
    if args.command == "new":
        try:
            path = plugin_scaffold(args.plugin, template=args.template, directory=args.dir)
        except ScaffoldError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        print(f"created {path}")
        print(f"next: cd {path} && pytest")
    return 0


if __name__ == "__main__":
    sys.exit(main())
