"""The local Kinesis emulator: launchers, stream helpers, a CLI and pytest fixtures.

``KinesisMock`` (npm ``kinesis-local``, best resharding fidelity) and ``MotoServer`` (moto's
server mode, fast, with DynamoDB) run a Kinesis API server on a free 127.0.0.1 port::

    with KinesisMock() as server:
        stream = server.create_stream("demo", shards=4)
        ...  # use stream.client_config with kinesis_core.client factories

``python -m kinesis_core.local up --stream demo:4`` does the same from a shell; the pytest plugin
(``kinesis_core.local.pytest_plugin``, opt-in with ``-p``) offers it as fixtures.
"""

from kinesis_core.local._server import (
    DUMMY_ACCESS_KEY_ID,
    DUMMY_SECRET_ACCESS_KEY,
    LOCAL_REGION,
    LocalServer,
    local_client_config,
)
from kinesis_core.local.kinesis_mock import (
    KINESIS_LOCAL_VERSION,
    KinesisMock,
    find_node,
    install_kinesis_local,
    kinesis_local_cache_dir,
)
from kinesis_core.local.moto_server import MotoServer
from kinesis_core.local.streams import (
    LocalStream,
    StreamFactory,
    create_stream,
    delete_stream,
    list_shards,
    merge_shards,
    read_records,
    split_shard,
    update_max_record_size,
    update_shard_count,
    wait_for_active,
)

__all__ = [
    "DUMMY_ACCESS_KEY_ID",
    "DUMMY_SECRET_ACCESS_KEY",
    "KINESIS_LOCAL_VERSION",
    "LOCAL_REGION",
    "KinesisMock",
    "LocalServer",
    "LocalStream",
    "MotoServer",
    "StreamFactory",
    "create_stream",
    "delete_stream",
    "find_node",
    "install_kinesis_local",
    "kinesis_local_cache_dir",
    "list_shards",
    "local_client_config",
    "merge_shards",
    "read_records",
    "split_shard",
    "update_max_record_size",
    "update_shard_count",
    "wait_for_active",
]
