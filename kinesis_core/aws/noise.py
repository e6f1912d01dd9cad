"""Third-party log lines that our commands (the demo, the benchmarks, the reliability suites,
``kinesis-connectors``) keep off the terminal, and only those.

Each entry is one known message, matched by logger name and the start of the message, so a
warning of this project or any other warning of the same library still shows.
"""

from __future__ import annotations

import logging

NOISE: tuple[tuple[str, str], ...] = (
    # apache_beam.io.gcp.internal.clients.bigquery logs this on the root logger at import when
    # google-apitools (Beam's GCP extra, which this project does not use) is not installed.
    ("root", "apitools not found, and bigquery client libraries are not available"),
)


class NoiseFilter(logging.Filter):
    """Drops the records listed in :data:`NOISE`."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not any(
            record.name == name and str(record.msg).startswith(prefix) for name, prefix in NOISE
        )


def silence_third_party_noise() -> None:
    """Filter :data:`NOISE` out at the root logger (where those records are logged), once.

    Call it where a command starts, before the import that logs: library code never does.
    """
    root = logging.getLogger()
    if not any(isinstance(f, NoiseFilter) for f in root.filters):
        root.addFilter(NoiseFilter())
