"""The rows of the chaos table and how it is printed."""

from __future__ import annotations

from dataclasses import dataclass

COLUMNS = ("fault", "runs affected", "outcome", "recover s", "stuck", "duplicated")


@dataclass
class ChaosRow:
    fault: str
    affected: int
    outcome: str
    recover_seconds: float
    stuck: int
    duplicated: int

    def cells(self) -> tuple[str, ...]:
        return (
            self.fault, str(self.affected), self.outcome, f"{self.recover_seconds:.1f}", str(self.stuck),
            str(self.duplicated),
        )  # fmt: skip


ROWS: list[ChaosRow] = []


def record(row: ChaosRow) -> ChaosRow:
    ROWS.append(row)
    print("chaos | " + " | ".join(row.cells()), flush=True)
    return row


def table(rows: list[ChaosRow]) -> str:
    cells = [COLUMNS, *(row.cells() for row in rows)]
    widths = [max(len(line[i]) for line in cells) for i in range(len(COLUMNS))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)) for line in cells]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)
