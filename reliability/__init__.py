"""Reliability suites: the core, Beam and Faust connectors under faults, restarts, bad input
and SIGKILL, each reconciled record by record into one row of a table.

``python -m reliability`` (or ``scripts/reliability``) runs them all against servers it starts
on 127.0.0.1 and prints the table; tests/integration/test_reliability_*.py run the fast ones
with smaller volumes in the test command. See docs/reliability.md.

Suites (each a function returning a :class:`~reliability.result.SuiteResult`):
:func:`~reliability.producer_faults.producer_under_faults`,
:func:`~reliability.consumer_faults.consumer_under_faults`,
:func:`~reliability.server_restart.server_restart`,
:func:`~reliability.bad_input.bad_input`,
:func:`~reliability.crash_loops.crash_loop` (consumer, Beam read, Faust worker),
:func:`~reliability.beam_retry.beam_retry` (a Beam write bundle retried after a SIGKILL).
"""
