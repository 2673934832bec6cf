"""Hypothesis settings of the fuzz tests (schemathesis over the REST schema, chat socket frames, proxy
payloads): derandomized in CI, so the same code always draws the same cases and CI never fails on a new
draw; randomized and longer under `make fuzz` (`LANGBOT_FUZZ=<factor>` multiplies each test's examples), the
run a developer makes before a release. A failure found there prints the `@reproduce_failure` blob to pin
the case."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

FUZZ_ENV = "LANGBOT_FUZZ"


def fuzz_factor() -> int:
    raw = os.environ.get(FUZZ_ENV, "").strip()
    return int(raw) if raw.isdigit() else 0


def fuzz_settings(*, max_examples: int) -> settings:
    factor = fuzz_factor()
    if factor > 0:
        return settings(
            max_examples=max_examples * factor,
            derandomize=False,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            print_blob=True,
        )
    return settings(max_examples=max_examples, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
