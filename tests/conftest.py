"""Session set-up shared by every test.

- The local emulator's fixtures (``kinesis_stream``, ``moto_stream``, ``fault_proxy``, ...):
  this project opts in to its own pytest plugin here, one of the ways docs/local.md gives
  users. The plugin imports the emulators and the AWS SDK only when a test asks for a fixture,
  so unit tests of pure code run without them.
- The ``peer`` marker: ``@pytest.mark.peer("async-kinesis")`` on a test of interoperation with
  a peer library. Where the bench extra does not install that peer on the running Python (an
  environment marker in pyproject.toml says so), its tests are deselected and the summary says
  which and why; CI runs on a Python where they run. A peer missing where it should be
  installed is not deselected: its tests fail on the import, naming it.
- SIGINT as in a terminal: a suite started in the background by a non-interactive shell
  (``nohup``, ``&``, some CI runners) inherits SIGINT ignored, and so would every process the
  tests start, so the tests that stop a command the way Ctrl-C does could not.
"""

from __future__ import annotations

import signal

import pytest

from benchmarks.peers import excluded_here, installed

pytest_plugins = ["kinesis_core.local.pytest_plugin"]

_DESELECTED_KEY = pytest.StashKey[dict[str, int]]()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "peer(distribution): interoperation with a peer library; deselected where the bench "
        "extra does not install it on this Python",
    )
    config.stash[_DESELECTED_KEY] = {}
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    keep: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    reasons = config.stash[_DESELECTED_KEY]
    for item in items:
        marker = item.get_closest_marker("peer")
        reason = None
        if marker is not None and not installed(marker.args[0]):
            reason = excluded_here(marker.args[0])
        if reason is None:
            keep.append(item)
        else:
            dropped.append(item)
            reasons[reason] = reasons.get(reason, 0) + 1
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    for reason, count in config.stash[_DESELECTED_KEY].items():
        terminalreporter.write_line(f"deselected {count} test(s): {reason}")
