"""Full garbage-collection pause in a started web process and a started plugin runtime, with the start-up
objects frozen (`LANGBOT_GC_FREEZE`, the default; see `foundation/process.py`) and without.

A full collection holds the GIL for as long as it walks the process's tracked objects, and every stream and
request of the process waits meanwhile. Each variant runs in a fresh subprocess that starts the process's
application as daphne or `python -m langbot_sdk.runtime` would, then times `COLLECTIONS` full collections.
No database is needed. Usage: `python -m bench.gc_pause`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
COLLECTIONS = 20

_MEASURE = f"""
import gc, json, statistics, time
pauses = []
for _ in range({COLLECTIONS}):
    started = time.perf_counter()
    gc.collect()
    pauses.append((time.perf_counter() - started) * 1000)
print(json.dumps({{"walked": len(gc.get_objects()), "frozen": gc.get_freeze_count(),
                  "p50": statistics.median(pauses), "max": max(pauses)}}))
"""
STARTS = {
    "web process (langbot_host.asgi)": "import langbot_host.asgi\n",
    "plugin runtime (plugins/)": (
        "from unittest import mock\n"
        "import langbot_sdk.runtime.__main__ as runtime\n"
        "async def built(build_service, *args):\n"
        "    build_service()\n"
        "with mock.patch.object(runtime, '_serve_stdio', built):\n"
        f"    runtime.main(['--plugins-dir', {str(REPO / 'plugins')!r}, '--log-level', 'WARNING'])\n"
    ),
}


def measure(start: str, *, freeze: bool) -> dict[str, float]:
    env = {
        **os.environ,
        "LANGBOT_GC_FREEZE": "true" if freeze else "false",
        "DJANGO_SETTINGS_MODULE": "langbot_host.settings",
        "LOG_LEVEL": "WARNING",
    }
    done = subprocess.run(
        [sys.executable, "-c", start + _MEASURE], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )
    if done.returncode != 0:
        raise SystemExit(f"the process did not start:\n{done.stderr}")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> int:
    rows = []
    for name, start in STARTS.items():
        for freeze in (True, False):
            m = measure(start, freeze=freeze)
            rows.append(
                (
                    f"{name}, {'frozen' if freeze else 'not frozen'}",
                    f"{int(m['walked']):,}",
                    f"{m['p50']:.1f} ms",
                    f"{m['max']:.1f} ms",
                )
            )
    header = ("process", "objects walked", f"full collection p50 ({COLLECTIONS})", "max")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(4)]
    print(" | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)))
    print("-+-".join("-" * w for w in widths))
    for row in rows:
        print(" | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
