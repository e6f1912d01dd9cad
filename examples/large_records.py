"""Large records, and a pointer to S3 for what is larger than the stream takes.

Starts kinesis-mock (Kinesis, with a stream whose maximum record size is 4 MiB) and moto (for
S3) on 127.0.0.1, then:

* writes small records and a 3 MiB one with the core producer: it learned the stream's limit
  from the stream, nothing to configure;
* tries a 6 MiB record: refused alone, with a message naming the limit and how to raise it;
* sends the 6 MiB payload the way to send what a stream should not carry: the bytes to S3, a
  small pointer record (bucket, key, size, SHA-256) through Kinesis;
* reads the stream back with the consumer, following the pointer, and checks every payload.

Run: ``.venv/bin/python examples/large_records.py`` (about 20 s: kinesis-mock takes about a
second per MiB).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from typing import Any

from kinesis_core import ClientConfig, create_botocore_client
from kinesis_core.checkpoint import MemoryCheckpointStore
from kinesis_core.consumer import TRIM_HORIZON, Consumer
from kinesis_core.errors import RecordTooLargeError
from kinesis_core.local import KinesisMock, MotoServer
from kinesis_core.producer import Producer

MIB = 1024 * 1024
BUCKET = "large-payloads"
POINTER = b'{"s3-pointer":'
"""What a pointer record starts with (an application's own convention)."""


def pointer_to(s3: Any, key: str, payload: bytes) -> bytes:
    """Put ``payload`` in S3; the small record that points at it."""
    s3.put_object(Bucket=BUCKET, Key=key, Body=payload)
    body = {"bucket": BUCKET, "key": key, "size": len(payload)}
    body["sha256"] = hashlib.sha256(payload).hexdigest()
    return POINTER + json.dumps(body).encode() + b"}"


def resolve(s3: Any, data: bytes) -> bytes:
    """A record's payload: itself, or what its pointer points at (checked)."""
    if not data.startswith(POINTER):
        return data
    where = json.loads(data[len(POINTER) : -1])
    payload: bytes = s3.get_object(Bucket=where["bucket"], Key=where["key"])["Body"].read()
    if len(payload) != where["size"] or hashlib.sha256(payload).hexdigest() != where["sha256"]:
        raise ValueError(f"s3://{where['bucket']}/{where['key']} is not what was sent")
    return payload


async def produce(stream: str, kinesis: ClientConfig, s3: Any) -> dict[str, bytes]:
    payloads = {f"event-{i}": f"small event {i}".encode() for i in range(5)}
    payloads["image-3mib"] = os.urandom(3 * MIB)
    payloads["video-6mib"] = os.urandom(6 * MIB)
    async with Producer(stream, client_config=kinesis) as producer:
        print(f"the stream takes records of up to {producer.record_bytes // MIB} MiB")
        try:
            await producer.put(payloads["video-6mib"], "video-6mib")
        except RecordTooLargeError as refused:
            print(f"refused: {str(refused).split(':')[1].strip()}")
        records = []
        for key, payload in payloads.items():
            if len(payload) + len(key) > producer.record_bytes:
                records.append((pointer_to(s3, key, payload), key))
            else:
                records.append((payload, key))
        batch = await producer.put_many(records)
        batch.raise_for_failures()
        sizes = sorted(len(data) for data, _ in records)
        print(f"wrote {len(batch)} records, the largest {sizes[-1] / MIB:.1f} MiB")
    return payloads


async def consume(stream: str, kinesis: ClientConfig, s3: Any, expected: int) -> dict[str, bytes]:
    got: dict[str, bytes] = {}
    async with Consumer(
        stream,
        client_config=kinesis,
        checkpoint_store=MemoryCheckpointStore(),  # a fresh emulator each run: start over
        initial_position=TRIM_HORIZON,
        idle_interval=0.2,
    ) as consumer:
        async for record in consumer:
            got[record.partition_key] = await asyncio.to_thread(resolve, s3, record.data)
            record.ack()
            if len(got) == expected:
                break
    return got


def main() -> None:
    with KinesisMock() as kinesis_mock, MotoServer() as moto:
        stream = kinesis_mock.create_stream("large-records", shards=1, max_record_size_kib=4096)
        s3 = create_botocore_client(moto.client_config(), "s3")
        try:
            s3.create_bucket(Bucket=BUCKET)
            sent = asyncio.run(produce(stream.name, stream.client_config, s3))
            read = asyncio.run(consume(stream.name, stream.client_config, s3, len(sent)))
            assert read == sent, "a payload came back different"
            print(f"read back {len(read)} payloads intact, the 6 MiB one through S3")
        finally:
            s3.close()
            stream.close()


if __name__ == "__main__":
    main()
