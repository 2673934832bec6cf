"""`make fuzz` draws more, and new, cases than CI: CI's fuzz settings stay derandomized."""

from __future__ import annotations

from tests.fuzzing import FUZZ_ENV, fuzz_settings


def test_ci_draws_the_same_cases_every_run(monkeypatch):
    monkeypatch.delenv(FUZZ_ENV, raising=False)

    chosen = fuzz_settings(max_examples=40)

    assert (chosen.max_examples, chosen.derandomize) == (40, True)


def test_make_fuzz_draws_more_cases_at_random(monkeypatch):
    monkeypatch.setenv(FUZZ_ENV, "10")

    chosen = fuzz_settings(max_examples=40)

    assert (chosen.max_examples, chosen.derandomize) == (400, False)
