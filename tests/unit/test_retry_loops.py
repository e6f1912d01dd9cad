"""One retry path: no loop of the core retries by hand.

A retry loop is a ``while`` or ``for`` loop whose body waits (a call of ``sleep``, whatever it
is called on: ``asyncio.sleep``, ``time.sleep``, ``clock.sleep``, ``self._sleep``) and either
catches an exception or asks a backoff for its next wait (``.failed(``, ``.pause(``,
``.delay(``). Such loops belong in :mod:`kinesis_core.aws.executor` (``execute`` and
``attempt`` with a :class:`~kinesis_core.aws.retry.RetryPolicy`); everywhere else only the
loops of :data:`NOT_RETRIES` (each with the reason it is not a retry) may have that shape.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import kinesis_core

CORE = Path(kinesis_core.__file__).parent
EXECUTOR = CORE / "aws" / "executor.py"
BACKOFF_ASKS = frozenset({"failed", "pause", "delay"})

NOT_RETRIES: dict[tuple[str, str], str] = {
    ("consumer/reading.py", "run_shard_read"): (
        "drives a shard reader's machine (ShardConsumer): its waits are the machine's "
        "decisions, and it raises what the machine does not take"
    ),
    ("fanout/consumers.py", "_drive"): (
        "drives ConsumerActivation: it waits for a consumer to become ACTIVE (or a DELETING "
        "one to go); each call's own failures are retried by the executor"
    ),
    ("local/_server.py", "_wait_until_ready"): (
        "waits for a local test server it started to answer (a process, not a service call)"
    ),
    ("local/streams.py", "wait_for_deleted"): (
        "a helper of the local test servers that polls until a stream is gone"
    ),
}
"""Loops with a retry's shape that are not retries: (module under kinesis_core/, function)."""


def _called_name(node: ast.Call) -> str | None:
    func = node.func
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return None


def is_retry_loop(loop: ast.While | ast.For | ast.AsyncFor) -> bool:
    names = {_called_name(n) for n in ast.walk(loop) if isinstance(n, ast.Call)}
    sleeps = bool(names & {"sleep", "_sleep"})
    catches = any(isinstance(n, ast.Try) and n.handlers for n in ast.walk(loop))
    return sleeps and (catches or bool(names & BACKOFF_ASKS))


def _own_nodes(function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.AST]:
    """The nodes of ``function``'s body, not those of the functions defined in it."""
    out: list[ast.AST] = []
    todo: list[ast.AST] = list(function.body)
    while todo:
        node = todo.pop()
        out.append(node)
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            todo.extend(ast.iter_child_nodes(node))
    return out


def retry_loops(source: str) -> list[tuple[str, int]]:
    """(function, line) of every retry loop in ``source``."""
    found = []
    for function in ast.walk(ast.parse(source)):
        if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            for loop in _own_nodes(function):
                if isinstance(loop, ast.While | ast.For | ast.AsyncFor) and is_retry_loop(loop):
                    found.append((function.name, loop.lineno))
    return sorted(found, key=lambda found: found[1])


def core_retry_loops() -> dict[tuple[str, str], int]:
    out: dict[tuple[str, str], int] = {}
    for path in sorted(CORE.rglob("*.py")):
        if path == EXECUTOR:
            continue
        module = path.relative_to(CORE).as_posix()
        for function, line in retry_loops(path.read_text(encoding="utf-8")):
            out.setdefault((module, function), line)
    return out


def test_no_loop_retries_by_hand_outside_the_executor() -> None:
    allowed = NOT_RETRIES.keys()
    found = core_retry_loops()
    by_hand = [
        f"kinesis_core/{m}:{line} {f}" for (m, f), line in found.items() if (m, f) not in allowed
    ]
    assert by_hand == [], (
        "hand-written retry loops (send the call through kinesis_core.aws.executor with a "
        f"RetryPolicy instead): {by_hand}"
    )


def test_every_allowed_loop_is_still_there() -> None:
    """An entry whose loop went goes too, so the lists stay short."""
    found = core_retry_loops()
    gone = sorted(NOT_RETRIES.keys() - found.keys())
    assert gone == []


PLANTED = {
    "asyncio.sleep after an exception": """
        async def put(client, record):
            while True:
                try:
                    return await client.put_record(**record)
                except Exception:
                    await asyncio.sleep(1.0)
    """,
    "time.sleep, counted": """
        def switch(conn):
            for attempt in range(5):
                try:
                    conn.execute("PRAGMA journal_mode = WAL")
                    return
                except sqlite3.OperationalError:
                    time.sleep(0.01)
    """,
    "the clock, in a method": """
        class Store:
            async def look(self):
                while True:
                    try:
                        return await self._client.describe()
                    except ClientError:
                        pass
                    await self._clock.sleep(0.1)
    """,
    "a backoff's pause, no exception": """
        async def wait_active(client, looks):
            status = None
            while status != "ACTIVE":
                await self._sleep(looks.pause(now()))
                status = await client.describe()
    """,
}


def test_a_planted_retry_loop_is_found() -> None:
    for name, source in PLANTED.items():
        assert retry_loops(textwrap.dedent(source)), name


def test_loops_that_retry_nothing_are_not_found() -> None:
    interval = """
        async def report(self):
            while True:
                await self._clock.sleep(self.interval)
                self.emit()
    """
    pages = """
        async def scan(client):
            while True:
                page = await client.scan()
                if not page.get("LastEvaluatedKey"):
                    return
    """
    assert retry_loops(textwrap.dedent(interval)) == []
    assert retry_loops(textwrap.dedent(pages)) == []
