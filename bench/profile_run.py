"""Where a run's CPU goes, per process, on the user's path (issue 33, item 1): `POST /api/v1/events?wait=10`
from 64 clients against the stack `make run` starts (`bench/_stack.py`), PostgreSQL by default.

While the clients run, py-spy samples the web process (daphne) and the worker (`py-spy record --nonblocking
--gil --format raw`: only the thread holding the GIL, i.e. running Python; py-spy's idle detection alone
kept threads blocked in epoll, a lock or a socket read as "active" on the loaded machine, nearly half the
samples); each stack is put in the row of the table its deepest recognised frame
belongs to (`WEB_ROWS`, `WORKER_ROWS`; the first match from the leaf wins within a tier, host stages before
framework layers). A row's ms per run is its share of the samples times the process's CPU per run measured
in the same window (psutil), so the rows of a process add up to its CPU per run.

SQL statements and Redis round trips per run come from `bench/_probe/sitecustomize.py`, which every Python
process of the stack imports when BENCH_PROBE_DIR is set (it wraps psycopg's `execute` and redis-py's
`send_packed_command`; no host code changes): counts by process over the same window, divided by the runs,
with the statements and commands grouped by shape. The probe and py-spy cost some CPU themselves, so the
absolute figures here are a little above `host_throughput`'s; the shares are what this script is for.

Usage: `python -m bench.profile_run [--runs N] [--clients 64] [--database postgresql|sqlite] [--keep DIR]`.
Needs py-spy (requirements-dev.txt) and permission to read the stack's processes (same user).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from bench._stack import NotMeasuredError, UserStack, events_many, user_stack

PROBE = Path(__file__).resolve().parent / "_probe"
FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")

# (row, file substring, function name or None). Tier 1 is the host's own stages: the deepest frame of a stack
# that matches one names its row. Only when none matches does tier 2 (frameworks and layers) decide.
Rule = tuple[str, str, str | None]
WEB_STAGES: list[Rule] = [
    ("auth (API key, scopes)", "bindings/authentication.py", None),
    ("auth (API key, scopes)", "bindings/roles.py", None),
    ("auth (API key, scopes)", "rest_framework/authentication.py", None),
    ("auth (API key, scopes)", "rest_framework/permissions.py", None),
    ("auth (API key, scopes)", "bindings/access.py", None),
    ("throttle", "bindings/throttling.py", None),
    ("throttle", "rest_framework/throttling.py", None),
    ("DRF parse + envelope validation", "gateway/api.py", "parse"),
    ("DRF parse + envelope validation", "gateway/envelope.py", None),
    ("DRF parse + envelope validation", "pydantic/main.py", "model_validate"),
    ("DRF parse + envelope validation", "foundation/api_input.py", "refuse_unstorable_text"),
    ("DRF parse + envelope validation", "rest_framework/request.py", "_parse"),
    ("binding resolution", "bindings/selectors.py", None),
    ("binding resolution", "bindings/triggers.py", None),
    ("held-conversation check", "runners/takeover/", None),
    ("event + item + runs built and inserted", "foundation/sql.py", None),
    ("event + item + runs built and inserted", "runners/lifecycle/services.py", "run_build"),
    ("event + item + runs built and inserted", "runners/lifecycle/services.py", "run_create_checks"),
    ("event_ingest, the rest", "gateway/services.py", None),
    ("dispatch (Celery publish)", "runners/lifecycle/dispatch.py", None),
    ("?wait= subscription and wait", "runners/lifecycle/services.py", "runs_wait"),
    ("?wait= subscription and wait", "runners/lifecycle/services.py", "_runs_wait"),
    ("?wait= subscription and wait", "runners/lifecycle/services.py", "_runs_still_active"),
    ("?wait= subscription and wait", "runners/live/layers.py", None),
    ("?wait= subscription and wait", "channels_redis/", None),
    ("answer: runs re-read", "runners/selectors.py", "runs_of_event"),
    ("answer: body + rendering", "gateway/api.py", "event_accepted_out"),
    ("answer: body + rendering", "rest_framework/renderers.py", None),
    ("answer: body + rendering", "rest_framework/response.py", None),
    ("database connection per request", "django/db/__init__.py", "close_old_connections"),
    ("database connection per request", "foundation/db.py", None),
    ("logging + metrics", "logging/__init__.py", None),
    ("logging + metrics", "prometheus_client/", None),
    ("logging + metrics", "foundation/logging", None),
    ("logging + metrics", "foundation/metrics", None),
    ("logging + metrics", "opentelemetry/", None),
]
WEB_LAYERS: list[Rule] = [
    ("middleware", "django/middleware/", None),
    ("middleware", "django/contrib/sessions/", None),
    ("middleware", "django/contrib/auth/middleware.py", None),
    ("middleware", "django/contrib/messages/", None),
    ("middleware", "whitenoise/", None),
    ("middleware", "foundation/limits.py", None),
    ("middleware", "foundation/api_input.py", None),
    ("middleware", "foundation/api_errors.py", None),
    ("Django/DRF request handling (URL, view dispatch)", "django/core/handlers/base.py", None),
    ("Django/DRF request handling (URL, view dispatch)", "django/urls/", None),
    ("Django/DRF request handling (URL, view dispatch)", "rest_framework/", None),
    ("Django/DRF request handling (URL, view dispatch)", "django/http/", None),
    ("Django/DRF request handling (URL, view dispatch)", "gateway/api.py", None),
    ("ASGI (Django's handler, asgiref, channels router)", "django/core/handlers/asgi.py", None),
    ("ASGI (Django's handler, asgiref, channels router)", "asgiref/", None),
    ("ASGI (Django's handler, asgiref, channels router)", "channels/", None),
    ("ASGI (Django's handler, asgiref, channels router)", "concurrent/futures/", None),
    ("ASGI (Django's handler, asgiref, channels router)", "threading.py", None),
    ("server (daphne, Twisted, asyncio loop)", "daphne/", None),
    ("server (daphne, Twisted, asyncio loop)", "twisted/", None),
    ("server (daphne, Twisted, asyncio loop)", "autobahn/", None),
    ("server (daphne, Twisted, asyncio loop)", "asyncio/", None),
    ("server (daphne, Twisted, asyncio loop)", "uvicorn/", None),
    ("server (daphne, Twisted, asyncio loop)", "granian/", None),
]
WORKER_STAGES: list[Rule] = [
    ("context build: person lookup", "runners/orchestrator/people.py", None),
    ("context build", "runners/orchestrator/context.py", None),
    ("context build", "transcripts/", None),
    ("claim: budget check", "runners/costs.py", None),
    ("claim: budget check", "admission.py", "_refuse_over_budget"),
    ("claim (load, lease, merge input)", "runners/orchestrator/admission.py", None),
    ("claim (load, lease, merge input)", "runners/orchestrator/worker.py", "admit"),
    ("runtime round trip (client side)", "runners/orchestrator/resources.py", None),
    ("runtime round trip (client side)", "langbot_sdk/", None),
    ("runtime round trip (client side)", "websockets/", None),
    ("runtime round trip (client side)", "runners/hosts", None),
    ("runtime round trip (client side)", "runtime_link", None),
    ("publish (channel layer)", "runners/live/", None),
    ("publish (channel layer)", "channels_redis/", None),
    ("run end", "runners/orchestrator/execution.py", "_finish"),
    ("run end", "runners/lifecycle/services.py", "run_next_queued"),
    ("run end", "runners/lifecycle/services.py", "run_dispatch_next_on_commit"),
    ("result persistence", "runners/orchestrator/ledger.py", None),
    ("result persistence", "runners/orchestrator/normalizer.py", None),
    ("result persistence", "runners/orchestrator/execution.py", "_append"),
    ("result persistence", "runners/orchestrator/execution.py", "_absorb"),
    ("platform delivery / observers", "runners/lifecycle/observers.py", None),
    ("platform delivery / observers", "delivery/", None),
    ("run execution, the rest", "runners/orchestrator/execution.py", None),
    ("run execution, the rest", "runners/orchestrator/", None),
    ("Celery message (receive, ack, task call)", "runners/tasks.py", None),
    ("logging + metrics", "logging/__init__.py", None),
    ("logging + metrics", "prometheus_client/", None),
    ("logging + metrics", "opentelemetry/", None),
]
WORKER_LAYERS: list[Rule] = [
    ("Celery message (receive, ack, task call)", "celery/", None),
    ("Celery message (receive, ack, task call)", "kombu/", None),
    ("Celery message (receive, ack, task call)", "billiard/", None),
    ("Celery message (receive, ack, task call)", "redis/", None),
    ("database executor + ORM, outside a stage", "django/", None),
    ("database executor + ORM, outside a stage", "psycopg", None),
    ("event loop (asyncio), threads", "asyncio/", None),
    ("event loop (asyncio), threads", "concurrent/futures/", None),
    ("event loop (asyncio), threads", "threading.py", None),
]


def _frames(stack: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for part in stack.split(";"):
        match = FRAME.match(part.strip())
        if match:
            out.append((match["func"], match["file"]))
        else:
            out.append((part.strip(), ""))
    return out


def _match(frames: list[tuple[str, str]], rules: list[Rule]) -> str | None:
    for func, file in reversed(frames):
        for row, where, name in rules:
            if where in file and (name is None or func == name):
                return row
    return None


def classify(raw: Path, stages: list[Rule], layers: list[Rule]) -> tuple[Counter[str], Counter[str]]:
    """Samples per row, and the leaf functions of the samples no rule took (to improve the rules)."""
    rows: Counter[str] = Counter()
    unknown: Counter[str] = Counter()
    if not raw.exists():
        return rows, unknown
    for line in raw.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = _frames(stack)
        row = _match(frames, stages) or _match(frames, layers)
        if row is None:
            row = "other"
            unknown[" < ".join(f"{f} ({p.rsplit('/', 2)[-1] if p else ''})" for f, p in reversed(frames[-3:]))] += count
        rows[row] += count
    return rows, unknown


def own_frames(raw: Path, depth: int = 2) -> Counter[str]:
    """Samples by the deepest frames of the project's own code in each stack (not a library's), so
    a profile of any load says which of the host's functions its CPU is under."""
    found: Counter[str] = Counter()
    if not raw.exists():
        return found
    for line in raw.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        own = [(f, p) for f, p in _frames(stack) if p and "site-packages" not in p and not p.startswith("/")]
        key = " < ".join(f"{f} ({p})" for f, p in reversed(own[-depth:])) if own else "(libraries only: server, loop)"
        found[key] += int(count_text)
    return found


def _probe_counts(directory: Path, pid: int) -> Counter[str]:
    path = directory / f"{pid}.json"
    with contextlib.suppress(OSError, ValueError):
        return Counter(json.loads(path.read_text())["counts"])
    return Counter()


def _py_spy() -> str:
    found = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(found).exists():
        raise NotMeasuredError("py-spy is not installed (pip install -r requirements-dev.txt)")
    return found


def _record(pid: int, out: Path, rate: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [_py_spy(), "record", "--pid", str(pid), "--rate", str(rate), "--nonblocking", "--gil", "--format", "raw",
         "--output", str(out)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip


def _stop_record(process: subprocess.Popen[bytes]) -> None:
    process.send_signal(signal.SIGINT)
    try:
        process.wait(60)
    except subprocess.TimeoutExpired:
        process.kill()


def _table(title: str, rows: Counter[str], cpu_ms_per_run: float) -> list[str]:
    total = sum(rows.values()) or 1
    lines = [f"\n{title}: {cpu_ms_per_run:.2f} ms CPU per run, {total} samples", "| row | % of CPU | ms per run |",
             "|---|---|---|"]  # fmt: skip
    for row, count in rows.most_common():
        lines.append(f"| {row} | {100 * count / total:.1f} | {cpu_ms_per_run * count / total:.2f} |")
    return lines


def _per_run(counts: Counter[str], runs: int, prefix: str, limit: int) -> list[str]:
    total = counts.get(prefix, 0)
    lines = [f"  {prefix} per run: {total / max(1, runs):.2f}"]
    shapes = Counter({k[len(prefix) + 1 :]: v for k, v in counts.items() if k.startswith(prefix + " ")})
    for shape, count in shapes.most_common(limit):
        per = count / max(1, runs)
        if per >= 0.05:
            lines.append(f"    {per:5.2f}  {shape}")
    return lines


async def _measure(stack: UserStack, probe: Path, out: Path, runs: int, clients: int, rate: int) -> list[str]:
    await events_many(stack, 256, clients, "warm up")
    pids = {role: stack.roles[role].pid for role in ("web", "worker") if role in stack.roles}
    if set(pids) != {"web", "worker"}:
        raise NotMeasuredError(f"found only these processes of the stack: {sorted(stack.roles)}")
    await asyncio.sleep(1.2)  # the probe writes its counts twice a second
    counts_before = {role: _probe_counts(probe, pid) for role, pid in pids.items()}
    recorders = {role: _record(pid, out / f"{role}.raw", rate) for role, pid in pids.items()}
    await asyncio.sleep(1.0)  # py-spy attached
    cpu_before = stack.cpu_seconds()
    _, statuses, elapsed = await events_many(stack, runs, clients, "hello")
    cpu_after = stack.cpu_seconds()
    for recorder in recorders.values():
        _stop_record(recorder)
    await asyncio.sleep(1.2)
    counts = {role: _probe_counts(probe, pid) - counts_before[role] for role, pid in pids.items()}
    completed = statuses.get("completed", 0)
    lines = [
        f"{completed}/{runs} runs completed at {clients} clients in {elapsed:.1f} s: {completed / elapsed:.0f} runs/s "
        f"(with py-spy and the probe attached); database {stack.database}; load average {os.getloadavg()[0]:.1f}",
    ]
    for role in ("web", "worker", "runtime"):
        if role in cpu_after:
            used = cpu_after[role] - cpu_before.get(role, 0)
            lines.append(f"  CPU per run, {role}: {1000 * used / max(1, completed):.2f} ms")
    tables = {"web": (WEB_STAGES, WEB_LAYERS), "worker": (WORKER_STAGES, WORKER_LAYERS)}
    for role, (stages, layers) in tables.items():
        rows, unknown = classify(out / f"{role}.raw", stages, layers)
        cpu_ms = 1000 * (cpu_after[role] - cpu_before.get(role, 0)) / max(1, completed)
        lines += _table(f"{role} ({pids[role]})", rows, cpu_ms)
        lines.append(f"\n{role}: SQL statements and Redis round trips")
        lines += _per_run(counts[role], completed, "sql", 25)
        lines += _per_run(counts[role], completed, "redis", 15)
        if unknown:
            lines.append(f"  not classified (top leaves, share of {role} samples):")
            total = sum(rows.values()) or 1
            lines += [f"    {100 * n / total:4.1f}%  {leaf}" for leaf, n in unknown.most_common(12)]
    return lines


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--database", default="postgresql", choices=["postgresql", "sqlite"])
    parser.add_argument("--rate", type=int, default=250, help="py-spy samples per second")
    parser.add_argument("--keep", help="keep py-spy's raw stacks and the probe's counts in this directory")
    args = parser.parse_args(list(argv) if argv is not None else None)
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench-profile-"))
    probe = work / "probe"
    probe.mkdir(parents=True, exist_ok=True)
    os.environ["BENCH_PROBE_DIR"] = str(probe)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(PROBE), os.environ.get("PYTHONPATH", "")) if p)
    try:
        _py_spy()
        with user_stack(args.database) as stack:
            lines = asyncio.run(_measure(stack, probe, work, args.runs, args.clients, args.rate))
    except NotMeasuredError as exc:
        print(f"not measured: {exc}")
        return 1
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
