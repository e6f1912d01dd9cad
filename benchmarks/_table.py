"""Rows, timing and the one table every benchmark prints into."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Row:
    """One measurement. Higher ``value`` is better.

    ``baseline`` names another subject of the same ``group``; the table prints
    ``value / baseline value`` and checks it against ``target`` (a minimum ratio), if any.
    """

    group: str
    subject: str
    value: float
    unit: str
    baseline: str | None = None
    target: float | None = None
    note: str = ""


def best_rates(
    subjects: Mapping[str, Callable[[], object]], items: int, *, repeat: int = 5, warmup: int = 1
) -> dict[str, float]:
    """Items per second of each subject's fastest of ``repeat`` timed calls.

    Subjects take turns, round after round, so that a burst of load from elsewhere on a shared
    machine hits all of them rather than one; the best run of each is the least disturbed. The
    garbage collector stays on (real code pays for it) but starts every run from a clean slate.
    """
    for fn in subjects.values():
        for _ in range(warmup):
            fn()
    best = dict.fromkeys(subjects, float("inf"))
    for _ in range(repeat):
        for name, fn in subjects.items():
            gc.collect()
            start = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - start)
    return {name: items / seconds for name, seconds in best.items()}


def _format_value(value: float) -> str:
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def render(rows: Sequence[Row]) -> str:
    """The table: benchmark, subject, value, ratio against the baseline, target and verdict."""
    by_key = {(row.group, row.subject): row for row in rows}
    header = ("benchmark", "subject", "value", "vs baseline", "target")
    lines: list[tuple[str, ...]] = []
    for row in rows:
        ratio = target = ""
        base = by_key.get((row.group, row.baseline)) if row.baseline else None
        if base is not None and base.value > 0:
            measured = row.value / base.value
            ratio = f"{measured:.2f}x {base.subject}"
            if row.target is not None:
                verdict = "ok" if measured >= row.target else "MISS"
                target = f">= {row.target:g}x {verdict}"
        elif row.baseline:
            ratio = f"({row.baseline} not measured)"
        value = f"{_format_value(row.value)} {row.unit}"
        subject = f"{row.subject} ({row.note})" if row.note else row.subject
        lines.append((row.group, subject, value, ratio, target))
    widths = [max(len(cells[i]) for cells in [header, *lines]) for i in range(len(header))]

    def fmt(cells: tuple[str, ...]) -> str:
        padded = [
            cell.rjust(width) if i == 2 else cell.ljust(width)
            for i, (cell, width) in enumerate(zip(cells, widths, strict=True))
        ]
        return "  ".join(padded).rstrip()

    rule = "  ".join("-" * width for width in widths)
    return "\n".join([fmt(header), rule, *(fmt(cells) for cells in lines)])
