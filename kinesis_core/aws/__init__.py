"""The call path: how a call reaches AWS and what comes back.

A machine's call (:mod:`.calls`) is sent by an executor (:mod:`.executor`) under a retry
policy (:mod:`.retry`, :mod:`.backoff`; the error table that decides what is retried is
:mod:`.classify`), through a botocore client (:mod:`.client`: configuration, client factories)
or, for the hot calls (GetRecords, GetShardIterator, PutRecords), the lean requests
(:mod:`.lean_requests`, :mod:`.lean_get_records`, :mod:`.lean_get_shard_iterator`) on our
HTTP/1.1 client (:mod:`.http1` parses, :mod:`.http1_pool` keeps the connections). GetRecords
answers are decoded by :mod:`.fastparse`. Nothing here imports the consumer, the producer, the
leases or an engine (tests/unit/test_layering.py).
"""
