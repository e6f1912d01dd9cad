"""Rows, timing, verdicts and the one table every benchmark prints into."""

from __future__ import annotations

import gc
import textwrap
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

WIDTH = 120
SUBJECT_WIDTH = 48
"""A subject and its note share a line up to this width; a longer note goes below the row."""

LEGEND = """\
value: the best of the runs of a subject (higher is better unless the group says otherwise).
vs baseline: value / the value of another subject of the same group, measured in the same run
  on this machine; the ratios hold better than the values on a machine shared with other work.
target: the minimum ratio (or value, or the maximum for a cost) the project aims for:
  ok = met, MISS = not met in this run, not checked = a peer it compares with was not measured.
  --strict makes a MISS fail the command (exit status 1); rerun one benchmark with --only NAME
  before concluding from a single MISS."""


@dataclass(frozen=True)
class Row:
    """One measurement. Higher ``value`` is better; None: not measured (``note`` says why).

    ``baseline`` names another subject of the same ``group``; the table prints
    ``value / baseline value`` and checks it against ``target`` (a minimum ratio), if any.
    ``minimum`` and ``maximum`` are targets for the value itself. ``quote_baseline`` prints the
    baseline's value beside the ratio: for a baseline that moves from one release of its
    engine to the next, so that a ratio that moved says whether the baseline did.
    """

    group: str
    subject: str
    value: float | None
    unit: str
    baseline: str | None = None
    target: float | None = None
    note: str = ""
    minimum: float | None = None
    maximum: float | None = None
    quote_baseline: bool = False


@dataclass(frozen=True)
class Verdict:
    text: str
    """e.g. ``>= 3x ok``"""
    ok: bool | None
    """None: not checked, because a value it needs was not measured (an absent peer)."""


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


def marginal_rate(items: int, rate: float, fewer: int, fewer_rate: float) -> float | None:
    """Items per second past a fixed cost: from the best rates of runs of ``items`` and of
    ``fewer`` items, what each item beyond ``fewer`` added to the time (the start and stop
    that both runs pay cancel out). None if the longer run was not the slower one (noise)."""
    extra_time = items / rate - fewer / fewer_rate
    return (items - fewer) / extra_time if extra_time > 0 else None


def _format_value(value: float) -> str:
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def ratio(row: Row, rows: Sequence[Row]) -> tuple[float | None, str]:
    """``value / baseline value`` and its text (or why there is none)."""
    if not row.baseline:
        return None, ""
    base = next((r for r in rows if r.group == row.group and r.subject == row.baseline), None)
    if base is None or base.value is None or row.value is None or base.value <= 0:
        return None, f"({row.baseline} not measured)"
    measured = row.value / base.value
    text = f"{measured:.2f}x {base.subject}"
    if row.quote_baseline:
        text += f" at {_format_value(base.value)} {base.unit}"
    return measured, text


def verdicts(row: Row, rows: Sequence[Row]) -> list[Verdict]:
    """The row's targets: met, missed, or not checked (a value they need was not measured)."""
    found: list[Verdict] = []
    targets = (
        (ratio(row, rows)[0], row.target, ">=", "x"),
        (row.value, row.minimum, ">=", f" {row.unit}"),
        (row.value, row.maximum, "<=", f" {row.unit}"),
    )
    for measured, goal, sign, unit in targets:
        if goal is None:
            continue
        target = f"{sign} {goal:g}{unit}" if unit == "x" else f"{sign} {_format_value(goal)}{unit}"
        if measured is None:
            found.append(Verdict(f"{target} not checked", None))
            continue
        ok = measured >= goal if sign == ">=" else measured <= goal
        found.append(Verdict(f"{target} {'ok' if ok else 'MISS'}", ok))
    return found


def misses(rows: Sequence[Row]) -> list[tuple[Row, Verdict]]:
    return [(row, v) for row in rows for v in verdicts(row, rows) if v.ok is False]


def headline(rows: Sequence[Row]) -> str:
    """The key figure of one benchmark's rows, for its progress line: the first row with a
    target (its ratio and verdicts), else the first with a ratio, else the first value."""
    if not rows:
        return "no rows"
    chosen = next((r for r in rows if verdicts(r, rows)), None) or next(
        (r for r in rows if r.baseline), rows[0]
    )
    _, ratio_text = ratio(chosen, rows)
    if chosen.value is None:
        return f"{chosen.subject}: not measured ({chosen.note})"
    figure = ratio_text or f"{_format_value(chosen.value)} {chosen.unit}"
    checks = ", ".join(v.text for v in verdicts(chosen, rows))
    return f"{chosen.subject} {figure}" + (f" ({checks})" if checks else "")


def render(rows: Sequence[Row], width: int = WIDTH) -> str:
    """The table, one section per group: subject, value, ratio against the baseline, targets.

    Lines never exceed ``width``: a note that does not fit beside its subject goes on the next
    line, and anything still too long wraps.
    """
    groups: dict[str, list[Row]] = {}
    for row in rows:
        groups.setdefault(row.group, []).append(row)
    cells: list[tuple[str, str, str, str, str]] = []
    for row in rows:
        subject, note = row.subject, row.note
        if note and len(f"{subject} ({note})") <= SUBJECT_WIDTH:
            subject, note = f"{subject} ({note})", ""
        value = "not measured" if row.value is None else f"{_format_value(row.value)} {row.unit}"
        checks = ", ".join(v.text for v in verdicts(row, rows))
        cells.append((subject, value, ratio(row, rows)[1], checks, note))
    widths = [
        min(max((len(c[i]) for c in cells), default=0), cap)
        for i, cap in enumerate((SUBJECT_WIDTH, 24, 30))
    ]
    by_row = dict(zip((id(row) for row in rows), cells, strict=True))
    lines = _fit(_columns(("subject", "value", "vs baseline", "target"), widths), width)
    for group, members in groups.items():
        lines += ["", *_fit(group, width)]
        for row in members:
            subject, value, ratio_text, checks, note = by_row[id(row)]
            line = _columns((subject, value, ratio_text, checks), widths)
            if len(line) > width and checks:  # the targets go on a line of their own
                lines += _fit(_columns((subject, value, ratio_text, ""), widths), width)
                lines += _fit(f"      target: {checks}", width)
            else:
                lines += _fit(line, width)
            if note:
                lines += textwrap.wrap(
                    note, width, initial_indent=" " * 6, subsequent_indent=" " * 6
                )
    return "\n".join(lines)


def _columns(cells: tuple[str, str, str, str], widths: Sequence[int]) -> str:
    subject, value, ratio_text, checks = cells
    padded = (subject.ljust(widths[0]), value.rjust(widths[1]), ratio_text.ljust(widths[2]))
    return "  " + "  ".join((*padded, checks)).rstrip()


def _fit(line: str, width: int) -> list[str]:
    """The line, or the line wrapped at spaces with an indent when it is wider than ``width``."""
    if len(line) <= width:
        return [line]
    return textwrap.wrap(line, width, subsequent_indent=" " * 6)
