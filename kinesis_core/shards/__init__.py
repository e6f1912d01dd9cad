"""Shards and keys (sans-I/O): hash keys (:mod:`.hashing`), the shards of a listing
(:mod:`.info`), the producer's shard map (:mod:`.shard_map`), balanced explicit hash keys
(:mod:`.allocator`), key skew (:mod:`.skew`) and a stream's maximum record size
(:mod:`.record_size`)."""
