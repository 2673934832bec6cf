"""The `make bench` driver: runs every benchmark script under `bench/` and reports which ones failed.

A benchmark is any `bench/<name>.py` whose name does not start with `_` (helpers such as `_common.py`
are shared code, not benchmarks). Each runs as `python -m bench.<name>` in its own process, from the
repository root, so it may import `bench._common` and configure Django itself; it prints its own
table. The driver prints a header per script, lets a failing or hanging script fail alone, prints a
summary and exits 1 when any script failed.

Usage: `python -m bench [NAME ...] [--list] [--timeout SECONDS]`.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent


@dataclass(frozen=True)
class Outcome:
    name: str
    status: str
    seconds: float


def discover() -> list[str]:
    return sorted(path.stem for path in BENCH_DIR.glob("*.py") if not path.stem.startswith("_"))


def _stop_group(process: subprocess.Popen[bytes]) -> None:
    """End a benchmark and whatever servers or workers it started (they share its process group)."""
    for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(wait)
            return


def run_one(name: str, timeout: float | None) -> Outcome:
    print(f"\n=== bench/{name}.py ===", flush=True)
    started = time.perf_counter()
    # Its own process group, so that a timeout or Ctrl-C also ends the processes the benchmark started.
    process = subprocess.Popen([sys.executable, "-m", f"bench.{name}"], cwd=REPO, start_new_session=True)
    try:
        returncode = process.wait(timeout)
    except subprocess.TimeoutExpired:
        _stop_group(process)
        status = f"timed out after {timeout:.0f} s"
    except KeyboardInterrupt:
        _stop_group(process)
        raise
    else:
        status = "ok" if returncode == 0 else f"failed (exit status {returncode})"
    elapsed = time.perf_counter() - started
    if status != "ok":
        print(f"--- bench/{name}.py {status}", flush=True)
    return Outcome(name, status, elapsed)


def print_summary(outcomes: list[Outcome]) -> None:
    width = max(len("benchmark"), *(len(outcome.name) for outcome in outcomes))
    print("\n=== summary ===")
    print(f"{'benchmark':<{width}}  {'seconds':>8}  status")
    for outcome in outcomes:
        print(f"{outcome.name:<{width}}  {outcome.seconds:>8.1f}  {outcome.status}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description="Run the LangBot Host benchmarks.")
    parser.add_argument("names", nargs="*", help="benchmarks to run (default: all)")
    parser.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per benchmark (0: none)")
    args = parser.parse_args(argv)

    available = discover()
    if args.list:
        print("\n".join(available))
        return 0
    unknown = sorted(set(args.names) - set(available))
    if unknown:
        parser.error(f"no such benchmark: {', '.join(unknown)} (available: {', '.join(available) or 'none'})")
    selected = args.names or available
    if not selected:
        print("no benchmarks found under bench/")
        return 0

    timeout = args.timeout or None
    outcomes = [run_one(name, timeout) for name in selected]
    print_summary(outcomes)
    return 0 if all(outcome.status == "ok" for outcome in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
