"""What a host process does once it has started: its start-up objects leave the garbage collector's view."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# Imports the web process's application as daphne does, then reports what a full collection has to walk.
WEB_PROCESS = """
import gc, json
import langbot_host.asgi
print(json.dumps({"walked": len(gc.get_objects()), "frozen": gc.get_freeze_count()}))
"""

# Starts the plugin runtime's service as `python -m langbot_sdk.runtime` does, without serving.
RUNTIME_PROCESS = """
import asyncio, gc, json, sys
from unittest import mock
import langbot_sdk.runtime.__main__ as runtime
async def built(build_service, *args):
    build_service()
with mock.patch.object(runtime, "_serve_stdio", built):
    runtime.main(["--plugins-dir", sys.argv[1]])
print(json.dumps({"walked": len(gc.get_objects()), "frozen": gc.get_freeze_count()}))
"""


def _started(script: str, *args: str, freeze: str) -> dict[str, int]:
    env = {**os.environ, "LANGBOT_GC_FREEZE": freeze, "DJANGO_SETTINGS_MODULE": "langbot_host.settings_test"}
    done = subprocess.run(
        [sys.executable, "-c", script, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    ("script", "args"), [(WEB_PROCESS, ()), (RUNTIME_PROCESS, (str(REPO / "plugins"),))], ids=["web", "runtime"]
)
def test_a_started_process_leaves_its_start_up_objects_out_of_full_collections(script, args):
    # Each full collection walked every module, class and URL pattern of the process, holding the GIL for
    # 100-200 ms while every stream of the process waited.
    frozen = _started(script, *args, freeze="true")
    unfrozen = _started(script, *args, freeze="false")

    assert unfrozen["frozen"] == 0
    assert frozen["frozen"] > 0.9 * unfrozen["walked"]
    assert frozen["walked"] < 0.1 * unfrozen["walked"]
