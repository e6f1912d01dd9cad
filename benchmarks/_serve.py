"""A small HTTP server in another process, for benchmarks that need a server of their own.

The server runs in a spawned process, so its CPU is not the benchmark's: ``served(main, *args)``
starts ``main(*args, conn)`` there and yields the server's URL; ``main`` builds its request
handler and calls :func:`serve_until_told`, which answers ``POST /`` on a free loopback port,
sends the port through ``conn`` and stops when anything comes back.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
from collections.abc import Awaitable, Callable, Iterator
from multiprocessing.connection import Connection
from typing import Any

from aiohttp import web

MAX_BODY = 64 * 1024 * 1024
"""The largest request body the server reads."""


async def serve_until_told(
    handle: Callable[[web.Request], Awaitable[web.Response]], conn: Connection
) -> None:
    """Answer ``POST /`` with ``handle`` until ``conn`` receives anything."""
    app = web.Application(client_max_size=MAX_BODY)
    app.router.add_post("/", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    server = site._server
    assert server is not None
    conn.send(server.sockets[0].getsockname()[1])  # type: ignore[union-attr]
    await asyncio.get_running_loop().run_in_executor(None, conn.recv)
    await runner.cleanup()


@contextlib.contextmanager
def served(main: Callable[..., None], *args: Any) -> Iterator[str]:
    """Run ``main(*args, conn)`` in a spawned process; yield ``http://127.0.0.1:PORT``."""
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=main, args=(*args, child), daemon=True)
    proc.start()
    try:
        yield f"http://127.0.0.1:{parent.recv()}"
    finally:
        parent.send("stop")
        proc.join(10)
        if proc.is_alive():
            proc.kill()
