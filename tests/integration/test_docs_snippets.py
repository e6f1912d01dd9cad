"""Every code block of README.md, CONTRIBUTING.md and docs/*.md runs, as written, against a
local emulator.

The blocks are taken out of the markdown and each runs in its own process, with the variables
``python -m kinesis_core.local up`` prints (endpoint, region, dummy credentials) and a time
limit; a failure names the block's file and line. The convention, for whoever writes docs:

* A fenced block whose info string is ``python``, ``bash``, ``sh`` or ``console`` is a program
  and runs. Other info strings (``text``, ``proto``, ``markdown``, ...) say the block is not
  one; a block without an info string is an error (say what it is).
* An HTML comment right before a block (it may span lines) sets how it runs::

      <!-- snippet: no-run: REASON -->            not run; the reason is required
      <!-- snippet: OPTION ... -->                runs, with these options

  Options (shell-quoted ``key=value`` words):

  ``streams=NAME:SHARDS,...``  fresh streams made before the block and deleted after it
                               (default ``demo:4``, what ``local up --stream demo:4`` makes;
                               ``streams=`` for none); ``NAME:SHARDS:KIB`` sets the
                               stream's maximum record size (``MaxRecordSizeInKiB``)
  ``fill=NAME:COUNT``          put COUNT JSON records (partition keys user-0 .. user-7)
                               into a stream before the block runs
  ``server=moto``              run against moto (Kinesis and DynamoDB) instead of kinesis-mock
  ``timeout=SECONDS``          the time limit (default 60)
  ``as=pytest``                the block is a test file: run it with pytest
  ``as=faust-worker``          the block is a Faust app module: run ``faust worker`` on it
                               with ``send=STREAM:JSON`` records written and wait until
                               ``expect=STREAM:COUNT`` records arrived, then stop the worker

* ``python`` blocks run as a script in a fresh temporary directory; ``bash``/``sh`` blocks run
  with ``bash -e`` in the repository root (they must leave nothing behind there); a
  ``console`` block is ``$ command`` lines, each followed by its expected output (a line
  ``...`` stands for any number of lines), run in the repository root and compared.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kinesis_core.aggregation import deaggregate
from kinesis_core.aws.client import create_botocore_client
from kinesis_core.local import LocalServer, StreamFactory, delete_stream, read_records

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", REPO / "CONTRIBUTING.md", *sorted((REPO / "docs").glob("*.md"))]
RUNNABLE = frozenset({"python", "bash", "sh", "console"})
OPTIONS = frozenset({"streams", "fill", "server", "timeout", "as", "send", "expect"})
SERVERS = {"kinesis-mock": "kinesis_mock", "moto": "moto_server"}
"""Server option -> the fixture of the plugin that starts it."""
DEFAULT_STREAMS = "demo:4"
DEFAULT_TIMEOUT = 60.0
FENCE = re.compile(r"^(`{3,})(.*)$")
DIRECTIVE = "<!-- snippet:"
OUTPUT_TAIL = 80


# -- reading the markdown ------------------------------------------------------------------------


def shown(path: Path) -> Path:
    """A path as a failure message shows it: relative to the repository when inside it."""
    return path.relative_to(REPO) if path.is_relative_to(REPO) else path


@dataclasses.dataclass(frozen=True)
class Block:
    """A fenced block of a markdown file, with the directive written before it, if any."""

    path: Path
    line: int
    """1-based line of the opening fence."""
    language: str
    code: str
    directive: str | None

    @property
    def where(self) -> str:
        return f"{shown(self.path)}:{self.line}"

    @property
    def no_run_reason(self) -> str | None:
        """The reason given by ``no-run: REASON`` ('' when the reason is missing)."""
        if self.directive is None or not self.directive.startswith("no-run"):
            return None
        return self.directive.removeprefix("no-run").lstrip(":").strip()

    @property
    def runs(self) -> bool:
        return self.language in RUNNABLE and self.no_run_reason is None

    def options(self) -> dict[str, str]:
        if self.directive is None or self.no_run_reason is not None:
            return {}
        pairs = (word.partition("=") for word in shlex.split(self.directive))
        return {key: value for key, _, value in pairs}

    def problems(self) -> list[str]:
        """What is wrong with the block's markup (nothing, for a valid block)."""
        found = []
        if not self.language:
            found.append("no info string: name the language (```text for prose or output)")
        reason = self.no_run_reason
        if reason == "":
            found.append("no-run needs a reason: <!-- snippet: no-run: REASON -->")
        if self.directive is not None and self.language not in RUNNABLE:
            found.append(f"a snippet directive on a ```{self.language} block, which never runs")
        if reason is None and self.directive is not None:
            for word in shlex.split(self.directive):
                key, equals, _ = word.partition("=")
                if not equals or key not in OPTIONS:
                    found.append(f"unknown snippet option {word!r} (known: {sorted(OPTIONS)})")
            options = self.options()
            if options.get("server", "kinesis-mock") not in SERVERS:
                found.append(f"server must be one of {sorted(SERVERS)}")
            kind = options.get("as")
            if kind is not None and (
                kind not in ("pytest", "faust-worker") or self.language != "python"
            ):
                found.append("as=pytest and as=faust-worker are for python blocks")
            if (kind == "faust-worker") != ("send" in options and "expect" in options):
                found.append("as=faust-worker goes with send=STREAM:JSON and expect=STREAM:COUNT")
        return found


def read_blocks(path: Path) -> tuple[list[Block], list[str]]:
    """The fenced blocks of a file, and the problems of directives that precede no block."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    dangling: list[str] = []
    pending: tuple[int, str] | None = None
    index = 0
    while index < len(lines):
        line = lines[index]
        fence = FENCE.match(line)
        if line.startswith(DIRECTIVE):
            if pending is not None:
                dangling.append(f"{shown(path)}:{pending[0]}: directive before no block")
            first = index
            text = line
            while "-->" not in text and index + 1 < len(lines):
                index += 1
                text += " " + lines[index].strip()
            if "-->" not in text:
                raise AssertionError(f"{shown(path)}:{first + 1}: unclosed comment")
            pending = (first + 1, text[len(DIRECTIVE) : text.index("-->")].strip())
        elif fence is not None:
            ticks, info = fence.group(1), fence.group(2).strip()
            end = index + 1
            while end < len(lines) and not lines[end].startswith(ticks):
                end += 1
            if end == len(lines):
                raise AssertionError(f"{shown(path)}:{index + 1}: unclosed block")
            language = info.split()[0] if info else ""
            code = "\n".join(lines[index + 1 : end]) + "\n"
            blocks.append(Block(path, index + 1, language, code, pending[1] if pending else None))
            pending = None
            index = end
        elif line.strip() and pending is not None:
            dangling.append(f"{shown(path)}:{pending[0]}: directive before no block")
            pending = None
        index += 1
    return blocks, dangling


def all_blocks() -> list[Block]:
    return [block for path in DOCS for block in read_blocks(path)[0]]


RUNNING = [block for block in all_blocks() if block.runs]


def test_every_block_is_run_or_marked() -> None:
    """Every block either runs or says why not: nothing is skipped silently."""
    problems: list[str] = []
    for path in DOCS:
        blocks, dangling = read_blocks(path)
        problems += dangling
        problems += [
            f"{block.where}: {problem}" for block in blocks for problem in block.problems()
        ]
    assert not problems, "\n".join(problems)
    assert len(RUNNING) >= 20, [block.where for block in RUNNING]


# -- running a block -----------------------------------------------------------------------------


@dataclasses.dataclass
class Finished:
    status: int | None
    """The exit status; None if the time limit ended the process."""
    output: str


def run_process(command: list[str], *, cwd: Path, env: dict[str, str], timeout: float) -> Finished:
    """Run ``command`` in its own process group; on the time limit, kill the whole group."""
    proc = subprocess.Popen(
        command,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = proc.communicate(timeout=timeout)
        return Finished(proc.returncode, output)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        return Finished(None, output)


def tail(text: str, lines: int = OUTPUT_TAIL) -> str:
    return "\n".join(text.splitlines()[-lines:]) or "(no output)"


def check_finished(block: Block, done: Finished, timeout: float, what: str = "") -> None:
    label = f"{block.where} ({block.language}{', ' + what if what else ''})"
    if done.status is None:
        pytest.fail(
            f"{label} did not end within {timeout:g} s; its output:\n{tail(done.output)}",
            pytrace=False,
        )
    if done.status != 0:
        pytest.fail(
            f"{label} failed with exit status {done.status}; its output:\n{tail(done.output)}",
            pytrace=False,
        )


def console_steps(code: str) -> list[tuple[str, list[str]]]:
    """``$ command`` lines and the output lines written after each."""
    steps: list[tuple[str, list[str]]] = []
    for line in code.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        elif steps:
            steps[-1][1].append(line.rstrip())
        elif line.strip():
            raise AssertionError(f"output before the first '$ ' command: {line!r}")
    return steps


def output_matches(expected: list[str], actual: list[str]) -> bool:
    """Line by line; an expected ``...`` line matches any number of actual lines."""
    if not expected:
        return not actual
    if expected[0] == "...":
        return any(output_matches(expected[1:], actual[i:]) for i in range(len(actual) + 1))
    return bool(actual) and actual[0] == expected[0] and output_matches(expected[1:], actual[1:])


def stream_specs(text: str) -> list[tuple[str, int, int | None]]:
    specs = []
    for item in filter(None, text.split(",")):
        name, _, rest = item.partition(":")
        count, _, kib = rest.partition(":")
        specs.append((name, int(count or 4), int(kib) if kib else None))
    return specs


def fill(factory: StreamFactory, spec: str) -> None:
    name, _, count = spec.partition(":")
    client = create_botocore_client(factory.client_config, "kinesis")
    try:
        entries = [
            {"Data": json.dumps({"n": n}).encode(), "PartitionKey": f"user-{n % 8}"}
            for n in range(int(count))
        ]
        for start in range(0, len(entries), 500):
            response = client.put_records(StreamName=name, Records=entries[start : start + 500])
            assert response["FailedRecordCount"] == 0, response
    finally:
        client.close()


@contextlib.contextmanager
def dynamodb_tables_cleaned(server: LocalServer) -> Iterator[None]:
    """Delete the DynamoDB tables a moto block created (lease tables), after it."""
    client = create_botocore_client(server.client_config(), "dynamodb")
    try:
        before = set(client.list_tables()["TableNames"])
        yield
        for table in set(client.list_tables()["TableNames"]) - before:
            client.delete_table(TableName=table)
    finally:
        client.close()


def top_level_entries() -> set[str]:
    return set(os.listdir(REPO))


def run_faust_worker(
    block: Block,
    options: dict[str, str],
    server: LocalServer,
    tmp_path: Path,
    env: dict[str, str],
    timeout: float,
) -> None:
    """Write the ``send`` record, run ``faust worker`` on the block until ``expect`` records
    are in their stream, then stop it with SIGTERM (it must stop within 30 s)."""
    (tmp_path / "snippet_app.py").write_text(block.code, encoding="utf-8")
    send_stream, _, record = options["send"].partition(":")
    expect_stream, _, count = options["expect"].partition(":")
    client = create_botocore_client(server.client_config(), "kinesis")
    log_path = tmp_path / "worker.log"
    command = [
        sys.executable,
        "-m",
        "faust",
        "--datadir",
        str(tmp_path / "faust-data"),
        "-A",
        "snippet_app",
        "worker",
        "--without-web",
        "-l",
        "warn",
    ]
    got: list[bytes] = []
    try:
        client.put_record(StreamName=send_stream, Data=record.encode(), PartitionKey="snippet")
        with open(log_path, "w") as log:
            worker = subprocess.Popen(
                command,
                cwd=tmp_path,
                env={**env, "PYTHONPATH": str(tmp_path)},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            try:
                deadline = time.monotonic() + timeout
                while time.monotonic() < deadline and worker.poll() is None:
                    time.sleep(0.5)
                    records = read_records(client, expect_stream)
                    got = [r.data for r in deaggregate(records, expect_stream)]
                    if len(got) >= int(count):
                        break
                exited = worker.poll()
                worker.send_signal(signal.SIGTERM)
                try:
                    worker.wait(30)
                    stopped = True
                except subprocess.TimeoutExpired:
                    stopped = False
            finally:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(worker.pid, signal.SIGKILL)
                worker.wait()
    finally:
        client.close()
    log_text = log_path.read_text(errors="replace")
    log_tail = tail(log_text)
    label = f"{block.where} (faust worker)"
    if exited is not None:
        pytest.fail(f"{label} exited with status {exited}; its log:\n{log_tail}", pytrace=False)
    if len(got) < int(count):
        pytest.fail(
            f"{label}: {len(got)} of {count} records in {expect_stream} after {timeout:g} s; "
            f"its log:\n{log_tail}",
            pytrace=False,
        )
    if not stopped:
        pytest.fail(f"{label} did not stop within 30 s of SIGTERM", pytrace=False)
    if "Traceback" in log_text or "[ERROR]" in log_text:
        pytest.fail(f"{label} logged an error; its log:\n{log_tail}", pytrace=False)


def run_console(block: Block, env: dict[str, str], timeout: float) -> None:
    for command, expected in console_steps(block.code):
        done = run_process(["bash", "-c", command], cwd=REPO, env=env, timeout=timeout)
        check_finished(block, done, timeout, f"$ {command}")
        actual = [line.rstrip() for line in done.output.rstrip("\n").splitlines()]
        if not output_matches(expected, actual):
            pytest.fail(
                f"{block.where} (console): the output of `{command}` differs from the docs.\n"
                f"--- the docs ---\n"
                + "\n".join(expected)
                + "\n--- the command ---\n"
                + "\n".join(actual),
                pytrace=False,
            )


@pytest.mark.integration
@pytest.mark.parametrize("block", RUNNING, ids=[block.where for block in RUNNING])
def test_snippet_runs(block: Block, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    run_block(block, request, tmp_path)


def run_block(block: Block, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """Run one block as its options say; pytest.fail naming its place if it fails or hangs."""
    options = block.options()
    timeout = float(options.get("timeout", DEFAULT_TIMEOUT))
    server_fixture = SERVERS[options.get("server", "kinesis-mock")]
    server: LocalServer = request.getfixturevalue(server_fixture)
    server.ensure_running()
    env = {key: value for key, value in os.environ.items() if not key.startswith("AWS_")}
    env.update(server.client_environment())
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["PYTHONUNBUFFERED"] = "1"
    before = top_level_entries()
    with contextlib.ExitStack() as stack:
        factory = stack.enter_context(StreamFactory(server.client_config(), prefix="snippet"))
        if server_fixture == "moto_server":
            stack.enter_context(dynamodb_tables_cleaned(server))
        client = create_botocore_client(server.client_config(), "kinesis")
        stack.callback(client.close)
        for name, shards, kib in stream_specs(options.get("streams", DEFAULT_STREAMS)):
            delete_stream(client, name)  # left over by an interrupted run
            factory(shards, name=name, max_record_size_kib=kib)
        if "fill" in options:
            fill(factory, options["fill"])
        kind = options.get("as")
        if kind == "faust-worker":
            run_faust_worker(block, options, server, tmp_path, env, timeout)
        elif kind == "pytest":
            (tmp_path / "test_snippet.py").write_text(block.code, encoding="utf-8")
            # As in a project that opted in to the fixtures (docs/local.md).
            plugin = "kinesis_core.local.pytest_plugin"
            command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", plugin]
            done = run_process(
                [*command, "test_snippet.py"], cwd=tmp_path, env=env, timeout=timeout
            )
            check_finished(block, done, timeout, "pytest")
        elif block.language == "python":
            (tmp_path / "snippet.py").write_text(block.code, encoding="utf-8")
            done = run_process(
                [sys.executable, "snippet.py"], cwd=tmp_path, env=env, timeout=timeout
            )
            check_finished(block, done, timeout)
        elif block.language == "console":
            run_console(block, env, timeout)
        else:
            command = ["bash", "-e", "-o", "pipefail", "-c", block.code]
            done = run_process(command, cwd=REPO, env=env, timeout=timeout)
            check_finished(block, done, timeout)
    left = top_level_entries() - before
    if left:
        pytest.fail(f"{block.where} left {sorted(left)} in the repository root", pytrace=False)


@pytest.mark.integration
def test_a_failing_hanging_or_wrong_block_is_reported_at_its_place(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """The runner itself: each way a block can go wrong fails the test, naming file and line."""
    page = tmp_path / "page.md"
    page.write_text(
        "\n".join(
            [
                "```python",
                "raise SystemExit('broken')",
                "```",
                "<!-- snippet: timeout=2 streams= -->",
                "```python",
                "import time; time.sleep(30)",
                "```",
                "<!-- snippet: streams= -->",
                "```console",
                "$ echo actual",
                "expected",
                "```",
                "<!-- snippet: streams= -->",
                "```bash",
                "touch left-behind.txt && rm left-behind.txt && false",
                "```",
            ]
        )
        + "\n",
        encoding="utf-8",
    )
    blocks, dangling = read_blocks(page)
    assert not dangling
    expected = [
        (1, "failed with exit status 1", "broken"),
        (5, "did not end within 2 s", ""),
        (9, "differs from the docs", "actual"),
        (14, "failed with exit status 1", ""),
    ]
    assert [block.line for block in blocks] == [line for line, _, _ in expected]
    for block, (line, message, output) in zip(blocks, expected, strict=True):
        work = tmp_path / f"block-{line}"
        work.mkdir()
        with pytest.raises(pytest.fail.Exception) as failed:
            run_block(block, request, work)
        assert f"{page}:{line}" in str(failed.value)
        assert message in str(failed.value)
        assert output in str(failed.value)
