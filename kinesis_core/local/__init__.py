"""The local Kinesis emulator: launchers, stream helpers, a CLI and pytest fixtures.

``KinesisMock`` (npm ``kinesis-local``, best resharding fidelity) and ``MotoServer`` (moto's
server mode, fast, with DynamoDB) run a Kinesis API server on a free 127.0.0.1 port::

    with KinesisMock() as server:
        stream = server.create_stream("demo", shards=4)
        ...  # use stream.client_config with kinesis_core.aws.client factories

``python -m kinesis_core.local up --stream demo:4`` does the same from a shell; the pytest plugin
(``kinesis_core.local.pytest_plugin``, opt-in with ``-p``) offers it as fixtures.
"""

from typing import TYPE_CHECKING

from kinesis_core._lazy import lazy_exports

# name -> the module defining it, imported on first use (kinesis_core/_lazy.py)
_EXPORTS = {
    "DUMMY_ACCESS_KEY_ID": "kinesis_core.local._server",
    "DUMMY_SECRET_ACCESS_KEY": "kinesis_core.local._server",
    "LOCAL_REGION": "kinesis_core.local._server",
    "LocalServer": "kinesis_core.local._server",
    "local_client_config": "kinesis_core.local._server",
    "KINESIS_LOCAL_VERSION": "kinesis_core.local.kinesis_mock",
    "KinesisMock": "kinesis_core.local.kinesis_mock",
    "find_node": "kinesis_core.local.kinesis_mock",
    "install_kinesis_local": "kinesis_core.local.kinesis_mock",
    "kinesis_local_cache_dir": "kinesis_core.local.kinesis_mock",
    "MotoServer": "kinesis_core.local.moto_server",
    "LocalStream": "kinesis_core.local.streams",
    "StreamFactory": "kinesis_core.local.streams",
    "create_stream": "kinesis_core.local.streams",
    "delete_stream": "kinesis_core.local.streams",
    "list_shards": "kinesis_core.local.streams",
    "merge_shards": "kinesis_core.local.streams",
    "read_records": "kinesis_core.local.streams",
    "split_shard": "kinesis_core.local.streams",
    "update_max_record_size": "kinesis_core.local.streams",
    "update_shard_count": "kinesis_core.local.streams",
    "wait_for_active": "kinesis_core.local.streams",
}

if TYPE_CHECKING:
    from kinesis_core.local._server import (
        DUMMY_ACCESS_KEY_ID as DUMMY_ACCESS_KEY_ID,
        DUMMY_SECRET_ACCESS_KEY as DUMMY_SECRET_ACCESS_KEY,
        LOCAL_REGION as LOCAL_REGION,
        LocalServer as LocalServer,
        local_client_config as local_client_config,
    )
    from kinesis_core.local.kinesis_mock import (
        KINESIS_LOCAL_VERSION as KINESIS_LOCAL_VERSION,
        KinesisMock as KinesisMock,
        find_node as find_node,
        install_kinesis_local as install_kinesis_local,
        kinesis_local_cache_dir as kinesis_local_cache_dir,
    )
    from kinesis_core.local.moto_server import (
        MotoServer as MotoServer,
    )
    from kinesis_core.local.streams import (
        LocalStream as LocalStream,
        StreamFactory as StreamFactory,
        create_stream as create_stream,
        delete_stream as delete_stream,
        list_shards as list_shards,
        merge_shards as merge_shards,
        read_records as read_records,
        split_shard as split_shard,
        update_max_record_size as update_max_record_size,
        update_shard_count as update_shard_count,
        wait_for_active as wait_for_active,
    )

__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
