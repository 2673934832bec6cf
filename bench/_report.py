"""What every benchmark prints with: percentiles of samples and the metric | value | target table."""

from __future__ import annotations

import math


def percentile(values: list[float], p: float) -> float:
    """The `p`-th percentile (0–100) of `values`, nearest rank; NaN for no values."""
    ordered = sorted(values)
    if not ordered:
        return math.nan
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * (len(ordered) - 1))))]


def print_table(rows: list[tuple[str, str, str]]) -> None:
    header = ("metric", "value", "target")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(3)]
    print(" | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)))
    print("-|-".join("-" * w for w in widths))
    for row in rows:
        print(" | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))


def print_grid(header: list[str], rows: list[list[str]]) -> None:
    """A table with any number of columns (e.g. one value column per database)."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    print(" | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)))
    print("-|-".join("-" * w for w in widths))
    for row in rows:
        print(" | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))
