"""`python -m langbot_sdk` (also installed as `langbot-sdk`): the runner author's command line.

Commands: `new <author>/<name> [--template echo|llm|tools] [--dir PATH]` scaffolds a plugin. The plugin
runtime the host starts has its own entry point, `python -m langbot_sdk.runtime`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from langbot_sdk.scaffold import TEMPLATES, ScaffoldError, plugin_scaffold


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m langbot_sdk", description="LangBot runner SDK tools.")
    commands = parser.add_subparsers(dest="command", required=True)
    new = commands.add_parser("new", help="scaffold a plugin with one AgentRunner, a README and a test")
    new.add_argument("plugin", metavar="<author>/<name>", help="the plugin's author and name, e.g. alice/weather")
    new.add_argument("--template", choices=sorted(TEMPLATES), default="echo", help="what the runner does")
    new.add_argument("--dir", type=Path, default=None, help="where to write it (default: ./<name>)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
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
