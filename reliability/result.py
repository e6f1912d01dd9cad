"""One row per suite, and the table they print into.

Every suite reconciles what it attempted against what came out, so the columns mean the same
thing everywhere: a record is *delivered* when it was read back (or consumed), *failed* when it
came back failed with a reason (an error code and its attempts), and *lost* when neither
happened. *Duplicated* counts the extra copies a reader saw (at-least-once allows them; they
are counted, never hidden). ``problems`` lists every invariant the suite saw broken; a suite
passes when nothing is lost and there are no problems.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass
class SuiteResult:
    """The figures of one suite run."""

    suite: str
    faults: int = 0
    """Faults injected: proxy faults (latency not counted), kills, outages or bad inputs."""
    attempted: int = 0
    delivered: int = 0
    failed: int = 0
    lost: int = 0
    duplicated: int = 0
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """Figures worth printing that have no column (max attempts, checkpoints checked...)."""

    @property
    def passed(self) -> bool:
        return self.lost == 0 and not self.problems

    def problem(self, message: str) -> None:
        """Record a broken invariant (the suite fails)."""
        self.problems.append(message)

    def note(self, message: str) -> None:
        self.notes.append(message)


_HEADER = (
    "suite",
    "faults injected",
    "attempted",
    "delivered",
    "failed (reason)",
    "lost",
    "duplicated",
    "seconds",
    "result",
)


def render(results: Sequence[SuiteResult]) -> str:
    """The table, then each suite's notes and problems under it."""
    rows = [
        (
            r.suite,
            f"{r.faults:,}",
            f"{r.attempted:,}",
            f"{r.delivered:,}",
            f"{r.failed:,}",
            f"{r.lost:,}",
            f"{r.duplicated:,}",
            f"{r.seconds:.1f}",
            "pass" if r.passed else "FAIL",
        )
        for r in results
    ]
    widths = [max(len(cells[i]) for cells in [_HEADER, *rows]) for i in range(len(_HEADER))]

    def fmt(cells: Sequence[str]) -> str:
        return "  ".join(
            cell.ljust(width) if i in (0, len(cells) - 1) else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    lines = [fmt(_HEADER), "  ".join("-" * w for w in widths), *(fmt(row) for row in rows)]
    for r in results:
        if r.notes or r.problems:
            lines.append("")
            lines.append(f"{r.suite}:")
            lines.extend(f"  - {note}" for note in r.notes)
            lines.extend(f"  ! {problem}" for problem in r.problems)
    return "\n".join(lines)
