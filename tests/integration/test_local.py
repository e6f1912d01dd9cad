"""The local emulators, their fixtures, stream helpers and CLI, against real servers on loopback."""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import itertools
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from kinesis_core.aws.client import (
    create_botocore_client,
    create_dynamodb_client,
    create_kinesis_client,
)
from kinesis_core.aws.config import ClientConfig
from kinesis_core.errors import ConfigurationError, EmulatorError, ValidationError
from kinesis_core.local import (
    KinesisMock,
    LocalStream,
    MotoServer,
    StreamFactory,
    local_client_config,
)
from kinesis_core.local._server import LOOPBACK, free_port
from kinesis_core.local.streams import read_records
from kinesis_core.shards.hashing import MAX_HASH_KEY, hash_key

pytestmark = pytest.mark.integration


def hash_range(shard: dict[str, Any]) -> tuple[int, int]:
    r = shard["HashKeyRange"]
    return int(r["StartingHashKey"]), int(r["EndingHashKey"])


def assert_covers_hash_space(open_shards: list[dict[str, Any]]) -> None:
    ranges = sorted(hash_range(s) for s in open_shards)
    assert ranges[0][0] == 0
    assert ranges[-1][1] == MAX_HASH_KEY
    for (_, end), (start, _) in itertools.pairwise(ranges):
        assert start == end + 1


async def put_and_get(config: ClientConfig, stream: str, key: str) -> tuple[str, list[Any]]:
    """PutRecord then read it back from its shard, with a client made by the factory."""
    async with create_kinesis_client(config) as client:
        put = await client.put_record(StreamName=stream, Data=b"hello", PartitionKey=key)
        iterator = await client.get_shard_iterator(
            StreamName=stream,
            ShardId=put["ShardId"],
            ShardIteratorType="AT_SEQUENCE_NUMBER",
            StartingSequenceNumber=put["SequenceNumber"],
        )
        page = await client.get_records(ShardIterator=iterator["ShardIterator"])
        return put["ShardId"], page["Records"]


@pytest.mark.parametrize("fixture", ["kinesis_stream", "moto_stream"])
def test_put_and_get_through_the_factory_client(
    fixture: str, request: pytest.FixtureRequest
) -> None:
    make: StreamFactory = request.getfixturevalue(fixture)
    stream = make(shards=4)
    shards = stream.shards()
    assert len(shards) == 4
    assert_covers_hash_space(shards)
    assert stream.client_config.endpoint_url == stream.endpoint_url
    assert stream.endpoint_url.startswith("http://127.0.0.1:")

    shard_id, records = asyncio.run(put_and_get(stream.client_config, stream.name, "user-42"))

    owner = next(s for s in shards if s["ShardId"] == shard_id)
    low, high = hash_range(owner)
    assert low <= hash_key("user-42") <= high
    assert [(r["Data"], r["PartitionKey"]) for r in records] == [(b"hello", "user-42")]
    assert [r["Data"] for r in stream.records()] == [b"hello"]


def test_each_call_makes_a_fresh_stream(kinesis_stream: StreamFactory) -> None:
    a, b = kinesis_stream(shards=1), kinesis_stream(shards=2)
    assert a.name != b.name
    assert len(b.shards()) == 2
    named = kinesis_stream(shards=1, name=f"{a.name}-named")
    assert named.name == f"{a.name}-named"


def test_split_merge_and_scale_keep_the_lineage(kinesis_stream: StreamFactory) -> None:
    stream = kinesis_stream(shards=4)
    s0, s1, s2, _ = (s["ShardId"] for s in stream.shards())
    parent_range = hash_range(stream.shards()[0])

    low, high = stream.split(s0)
    by_id = {s["ShardId"]: s for s in stream.shards()}
    assert "EndingSequenceNumber" in by_id[s0]["SequenceNumberRange"]  # the parent is closed
    for child in (low, high):
        assert by_id[child]["ParentShardId"] == s0
        assert "AdjacentParentShardId" not in by_id[child]
    (low_start, low_end), (high_start, high_end) = hash_range(by_id[low]), hash_range(by_id[high])
    assert (low_start, high_end) == parent_range
    assert high_start == low_end + 1 == parent_range[0] + (parent_range[1] + 1) // 2

    merged = stream.merge(s1, s2)
    by_id = {s["ShardId"]: s for s in stream.shards()}
    assert by_id[merged]["ParentShardId"] == s1
    assert by_id[merged]["AdjacentParentShardId"] == s2
    assert hash_range(by_id[merged]) == (hash_range(by_id[s1])[0], hash_range(by_id[s2])[1])
    assert len(stream.shards(open_only=True)) == 4
    assert_covers_hash_space(stream.shards(open_only=True))

    open_shards = stream.scale(8)
    assert len(open_shards) == 8
    assert_covers_hash_space(open_shards)
    closed = {s["ShardId"] for s in stream.shards()} - {s["ShardId"] for s in open_shards}
    assert {low, high, merged} <= closed
    assert all(s.get("ParentShardId") for s in open_shards)

    # Records written after the resharding land on the open shards and can be read back.
    landed = stream.put(b"after", "k", explicit_hash_key=MAX_HASH_KEY)["ShardId"]
    assert landed in {s["ShardId"] for s in open_shards}
    assert [(r["Data"], r["ShardId"]) for r in stream.records()] == [(b"after", landed)]


def test_split_refuses_a_key_outside_the_shard(kinesis_stream: StreamFactory) -> None:
    stream = kinesis_stream(shards=2)
    first = stream.shards()[0]
    with pytest.raises(ValidationError, match="new_starting_hash_key"):
        stream.split(first["ShardId"], hash_range(first)[1] + 1)


def test_streams_take_a_maximum_record_size_and_update_it(kinesis_stream: StreamFactory) -> None:
    stream = kinesis_stream(shards=1, max_record_size_kib=2048)
    client = stream.boto_client()

    def limit() -> Any:
        return client.describe_stream_summary(StreamName=stream.name)[
            "StreamDescriptionSummary"
        ].get("MaxRecordSizeInKiB")

    assert limit() == 2048
    stream.put(b"x" * (2 * 1024 * 1024 - 1), "k")
    stream.update_max_record_size(10240)
    assert limit() == 10240
    for bad in (1023, 10241, 2048.0, True):
        with pytest.raises(ConfigurationError, match=r"max_record_size_kib: must be an int in"):
            stream.update_max_record_size(bad)  # type: ignore[arg-type]
        with pytest.raises(ConfigurationError, match="max_record_size_kib"):
            kinesis_stream(shards=1, max_record_size_kib=bad)


def test_factory_deletes_its_streams(kinesis_mock: KinesisMock) -> None:
    with StreamFactory(kinesis_mock.client_config(), prefix="test factory/deletes") as make:
        stream = make(shards=1)
        assert stream.name.startswith("test-factory-deletes-")
    client = create_botocore_client(kinesis_mock.client_config(), "kinesis")
    try:
        deadline = time.monotonic() + 30
        while stream.name in client.list_streams()["StreamNames"]:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        client.close()


def test_moto_serves_dynamodb_on_the_same_endpoint(moto_stream: StreamFactory) -> None:
    config = moto_stream(shards=1).client_config
    assert config.dynamodb_endpoint_url == config.endpoint_url

    async def main() -> dict[str, Any]:
        async with create_dynamodb_client(config) as ddb:
            await ddb.create_table(
                TableName="leases",
                KeySchema=[{"AttributeName": "leaseKey", "KeyType": "HASH"}],
                AttributeDefinitions=[{"AttributeName": "leaseKey", "AttributeType": "S"}],
                BillingMode="PAY_PER_REQUEST",
            )
            await ddb.put_item(TableName="leases", Item={"leaseKey": {"S": "shardId-0"}})
            item = await ddb.get_item(TableName="leases", Key={"leaseKey": {"S": "shardId-0"}})
            await ddb.delete_table(TableName="leases")
            return dict(item["Item"])

    assert asyncio.run(main()) == {"leaseKey": {"S": "shardId-0"}}


def test_moto_keeps_connections_open(moto_server: MotoServer) -> None:
    """Calls on one connection are answered over HTTP/1.1 and the connection stays open, as
    AWS keeps it (werkzeug's server, moto's own, closed it after every answer)."""
    headers = {
        "Content-Type": "application/x-amz-json-1.1",
        "X-Amz-Target": "Kinesis_20131202.ListStreams",
        # moto picks the service from the signature's scope and does not check the signature
        "Authorization": "AWS4-HMAC-SHA256 Credential=testing/20261126/us-east-1/kinesis/"
        "aws4_request, SignedHeaders=host, Signature=0",
    }
    connection = http.client.HTTPConnection(LOOPBACK, moto_server.port, timeout=10)
    try:
        sockets = []
        for _ in range(3):
            connection.request("POST", "/", body=b"{}", headers=headers)
            response = connection.getresponse()
            assert response.status == 200
            assert "StreamNames" in json.loads(response.read())
            assert response.version == 11
            assert response.getheader("Connection", "keep-alive").lower() != "close"
            sockets.append(connection.sock)
        assert sockets[0] is not None
        assert all(sock is sockets[0] for sock in sockets)
    finally:
        connection.close()


def test_persisted_data_survives_a_stop_and_start(tmp_path: Path) -> None:
    server = KinesisMock(persist_path=tmp_path / "data", persist_interval=0.2)
    with server:
        endpoint = server.endpoint_url
        stream = server.create_stream("kept", shards=2)
        sent = [stream.put(f"r{i}".encode(), f"k{i}")["SequenceNumber"] for i in range(5)]
        stream.split(stream.shards()[0]["ShardId"])
        server.stop()
        assert not server.running
        server.start()
        assert server.endpoint_url == endpoint  # same port: existing configs keep working
        try:
            kept = [int(r["SequenceNumber"]) for r in stream.records()]
            assert sorted(kept) == sorted(int(s) for s in sent)
            assert len(stream.shards()) == 4
        finally:
            stream.close()
    assert not server.running


def _write_until(
    config: ClientConfig,
    stop: threading.Event,
    prefix: bytes,
    acked: list[bytes],
    refused: list[BaseException],
) -> None:
    """put_record one record after the other until ``stop``; note what was acknowledged."""
    client = create_botocore_client(config, "kinesis", max_attempts=1)
    try:
        i = 0
        while not stop.is_set():
            data = b"%s-%d" % (prefix, i)
            try:
                client.put_record(StreamName="busy", Data=data, PartitionKey=str(i))
                acked.append(data)
            except Exception as exc:  # the server is going away
                refused.append(exc)
                time.sleep(0.01)
            i += 1
    finally:
        client.close()


def test_stop_loses_no_write_it_acknowledged_while_clients_keep_writing(tmp_path: Path) -> None:
    """Writers keep going while stop() waits for the final snapshot: every write the server
    acknowledged is there after the restart (before the drain, about 3 were lost per stop)."""
    server = KinesisMock(persist_path=tmp_path / "data", persist_interval=0.2)
    with server:
        server.create_stream("busy", shards=2).close()
        config = server.client_config(connect_timeout=1.0, read_timeout=5.0)
        for round_ in range(5):
            acked: list[bytes] = []
            refused: list[BaseException] = []
            stop = threading.Event()
            writers = [
                threading.Thread(
                    target=_write_until,
                    args=(config, stop, b"%d-%d" % (round_, w), acked, refused),
                )
                for w in range(3)
            ]
            for writer in writers:
                writer.start()
            deadline = time.monotonic() + 30
            while len(acked) < 30 and time.monotonic() < deadline:  # every writer under way
                time.sleep(0.01)
            server.stop()
            stop.set()
            for writer in writers:
                writer.join()
            server.start()
            check = create_botocore_client(server.client_config(), "kinesis")
            try:
                kept = {r["Data"] for r in read_records(check, "busy")}
            finally:
                check.close()
            assert acked
            assert [d for d in acked if d not in kept] == []


def test_a_server_that_dies_while_starting_reports_its_log(tmp_path: Path) -> None:
    server = KinesisMock(env={"KINESIS_MOCK_CERT_PATH": str(tmp_path / "missing.json")})
    with pytest.raises(EmulatorError, match="exited with code") as info:
        server.start()
    assert "missing.json" in str(info.value)
    assert not server.running


def test_missing_node_fails_with_what_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(EmulatorError, match=r"apt-get install nodejs npm"):
        KinesisMock(cache_dir=tmp_path / "cache").start()


PLUGIN = "kinesis_core.local.pytest_plugin"


def test_the_plugin_is_opt_in(tmp_path: Path) -> None:
    """Installing the package adds nothing to other projects' pytest runs."""
    (tmp_path / "test_other.py").write_text("def test_plain(kinesis_stream):\n    pass\n")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1, result.stdout
    assert "fixture 'kinesis_stream' not found" in result.stdout


def test_fixture_without_node_is_a_failure_not_a_skip(tmp_path: Path) -> None:
    (tmp_path / "test_needs_node.py").write_text(
        textwrap.dedent(
            """
            def test_uses_the_fixture(kinesis_stream):
                kinesis_stream(shards=1)
            """
        )
    )
    env = {**os.environ, "PATH": str(tmp_path / "no-bin")}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            PLUGIN,
            str(tmp_path),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1, result.stdout
    assert "1 error" in result.stdout
    assert "skipped" not in result.stdout
    assert "Node.js" in result.stdout
    assert "apt-get install nodejs npm" in result.stdout


# -- the CLI ------------------------------------------------------------------------------------


class Cli:
    """``python -m kinesis_core.local up ...`` in a subprocess, its output read by a thread."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kinesis_core.local", "up", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))

    def read_until(self, marker: str, timeout: float = 60.0) -> list[str]:
        deadline = time.monotonic() + timeout
        while not any(marker in line for line in self.seen):
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"no {marker!r} in the CLI's output: {self.seen}"
            with contextlib.suppress(queue.Empty):
                self.seen.append(self.lines.get(timeout=remaining))
        return self.seen

    def exports(self) -> dict[str, str]:
        lines = self.read_until("Press Ctrl-C")
        pairs = (line.removeprefix("export ").split("=", 1) for line in lines)
        return {k: v for k, v in (p for p in pairs if len(p) == 2)}

    def server_pid(self) -> int:
        line = next(line for line in self.read_until("(pid ") if "(pid " in line)
        return int(line.rsplit("(pid ", 1)[1].rstrip(")"))

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def listening_addresses(pid: int) -> set[str]:
    """The addresses that process ``pid`` and its descendants listen on (TCP, IPv4 and IPv6)."""
    root = psutil.Process(pid)
    return {
        conn.laddr.ip
        for proc in (root, *root.children(recursive=True))
        for conn in proc.net_connections(kind="inet")
        if conn.status == psutil.CONN_LISTEN
    }


def wait_gone(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize(
    ("server", "stop_signal"),
    [("kinesis-mock", signal.SIGINT), ("moto", signal.SIGTERM)],
)
def test_cli_up_serves_streams_and_stops_cleanly(server: str, stop_signal: int) -> None:
    cli = Cli(
        "--server", server, "--stream", "demo:2", "--stream", "other", "--stream", "big:1:10240"
    )
    try:
        exports = cli.exports()
        pid = cli.server_pid()
        endpoint = exports["AWS_ENDPOINT_URL_KINESIS"]
        assert endpoint.startswith("http://127.0.0.1:")
        assert exports["AWS_DEFAULT_REGION"] == "us-east-1"
        assert exports["AWS_ACCESS_KEY_ID"] == exports["AWS_SECRET_ACCESS_KEY"] == "testing"
        assert ("AWS_ENDPOINT_URL_DYNAMODB" in exports) == (server == "moto")
        # Nothing the launcher started listens beyond loopback (kinesis-mock asks for 0.0.0.0,
        # its plain and TLS ports both: before, both were reachable from the network).
        assert listening_addresses(cli.proc.pid) == {LOOPBACK}

        stream = LocalStream("demo", local_client_config(endpoint))
        try:
            assert len(stream.shards()) == 2
            assert len(LocalStream("other", stream.client_config).shards()) == 4
            big = stream.boto_client().describe_stream_summary(StreamName="big")
            limit = big["StreamDescriptionSummary"].get("MaxRecordSizeInKiB")
            assert limit == (10240 if server == "kinesis-mock" else None)  # moto ignores it
            stream.put(b"x", "k")
            assert [r["Data"] for r in stream.records()] == [b"x"]
        finally:
            stream.close()

        cli.proc.send_signal(stop_signal)
        assert cli.proc.wait(30) == 0
        assert wait_gone(pid)
        assert any("stopped" in line for line in cli.read_until("stopped"))
    finally:
        cli.close()


def test_cli_server_dies_with_a_killed_cli() -> None:
    cli = Cli("--server", "moto", "--port", str(free_port()))
    try:
        pid = cli.server_pid()
        cli.exports()
        cli.proc.kill()  # SIGKILL: no cleanup code runs in the CLI
        cli.proc.wait(10)
        assert wait_gone(pid)
    finally:
        cli.close()


def test_cli_install_is_idempotent_and_names_what_is_missing(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "kinesis_core.local", "install"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "kinesis-local 0.6.2" in done.stdout

    bare = {**os.environ, "PATH": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    failed = subprocess.run(command, capture_output=True, text=True, timeout=60, env=bare)
    assert failed.returncode == 1
    assert "apt-get install nodejs npm" in failed.stderr


def test_a_port_taken_in_a_race_is_replaced(monkeypatch: pytest.MonkeyPatch) -> None:
    """Another program binds the chosen port before the server does: pick another one."""
    import kinesis_core.local._server as server_module

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))  # bound: the server cannot bind it (and nothing answers)
        ports = [taken.getsockname()[1]]
        real_free_port = server_module.free_port
        monkeypatch.setattr(
            server_module, "free_port", lambda port=0: ports.pop() if ports else real_free_port()
        )
        with MotoServer() as server:
            assert server.port != taken.getsockname()[1]
            stream = server.create_stream("after-the-race", shards=1)
            assert stream.shards()
            stream.close()
