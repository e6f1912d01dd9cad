"""Benchmarks: ``python -m benchmarks [--quick] [--only NAME]``.

Each ``bench_<name>.py`` module exposes ``run(quick: bool) -> list[Row]``. Peers are measured in
the same run and reported as ratios, because absolute times drift on a shared machine.
"""
