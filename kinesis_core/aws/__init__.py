"""The call path: how a call reaches AWS and what comes back.

A machine's call (:mod:`.calls`) is sent by an executor (:mod:`.executor`) under a retry
policy (:mod:`.retry`, :mod:`.backoff`; the error table that decides what is retried is
:mod:`.classify`; :mod:`.exceptions` says what kind an exception is), through a botocore
client (:mod:`.client` makes them from a :mod:`.config`; :mod:`.log_filter` masks their
secrets in botocore's logs) or, for the hot calls (GetRecords, GetShardIterator, PutRecords),
the lean requests (:mod:`.lean_requests`, :mod:`.lean_get_records`,
:mod:`.lean_get_shard_iterator`) on our HTTP/1.1 client (:mod:`.direct_http` with the
client's settings; :mod:`.http1` parses, :mod:`.http1_pool` keeps the connections).
GetRecords answers are decoded by :mod:`.fastparse`. Every use of botocore's private names is
in :mod:`.botocore_private`. Nothing here imports the consumer, the producer, the
leases or an engine (tests/unit/test_layering.py).
"""
