"""The Glue Schema Registry client: schema versions by definition and by id, cached.

A :class:`SchemaRegistry` sends its calls (:mod:`.calls`) on aiobotocore's ``glue`` client
through the core's :class:`~kinesis_core.aws.executor.AsyncExecutor` under one
:class:`~kinesis_core.aws.retry.RetryPolicy` (throttling and 5xx answers are retried with backoff;
botocore's own retries are off). Two caches make a long-running process ask once per schema
version: versions by (schema name, definition) for writers and by version id for readers;
concurrent asks for one key share one call. A version the registry does not have is
remembered as missing for ``unavailable_ttl`` seconds, so a stream full of its records does
not ask per record.

Async callers use the ``async`` methods on their loop; synchronous callers (Beam's DoFns,
Faust's codecs) use the ``*_blocking`` ones, which run on the process's event-loop thread
(:class:`~kinesis_core.runtime.loop_thread.LoopThread`). The registry keeps one client per loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field, replace
from typing import Any, NoReturn, TypeVar

from kinesis_core.aws.calls import ApiCall
from kinesis_core.aws.classify import error_details, error_message
from kinesis_core.aws.config import ClientConfig
from kinesis_core.aws.executor import AsyncExecutor
from kinesis_core.aws.retry import RetryPolicy
from kinesis_core.errors import ConfigurationError
from kinesis_core.runtime.clock import SYSTEM_CLOCK, Clock
from kinesis_core.runtime.loop_thread import LoopThread
from kinesis_schema_registry.calls import (
    CreateSchema,
    GetSchema,
    GetSchemaByDefinition,
    GetSchemaVersion,
    RegisterSchemaVersion,
)
from kinesis_schema_registry.errors import (
    SchemaCompatibilityError,
    SchemaNotRegisteredError,
    SchemaRegistryError,
    SchemaVersionUnavailableError,
)
from kinesis_schema_registry.formats import DataFormat, Schema

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

COMPATIBILITY_MODES = frozenset(
    {
        "NONE",
        "DISABLED",
        "BACKWARD",
        "BACKWARD_ALL",
        "FORWARD",
        "FORWARD_ALL",
        "FULL",
        "FULL_ALL",
    }
)
DEFAULT_REGISTRY = "default-registry"
"""The registry AWS's serde uses when none is named."""
NOT_FOUND = "EntityNotFoundException"
DEFAULT_RETRY = RetryPolicy(base=0.1, cap=5.0, attempts=8, deadline=60.0)
PENDING_RETRY = RetryPolicy(base=0.2, cap=2.0, attempts=None, deadline=30.0)
"""How long a new version's compatibility check (status PENDING) is waited for."""


@dataclass(frozen=True, kw_only=True)
class RegistryConfig:
    """Where the registry is and how it is used; picklable (Beam ships it to workers).

    ``client_config`` gives the region and credentials (its Kinesis endpoint is not used);
    ``endpoint_url`` is Glue's (None: botocore's, or ``AWS_ENDPOINT_URL_GLUE``).
    ``auto_register`` lets writers register a definition the schema does not have yet (and
    create the schema, with ``compatibility``, when there is none).
    """

    registry_name: str = DEFAULT_REGISTRY
    client_config: ClientConfig | None = None
    endpoint_url: str | None = None
    auto_register: bool = False
    compatibility: str = "BACKWARD"
    retry: RetryPolicy = DEFAULT_RETRY
    unavailable_ttl: float = 60.0

    def __post_init__(self) -> None:
        if not isinstance(self.registry_name, str) or not 1 <= len(self.registry_name) <= 255:
            raise ConfigurationError(
                "registry_name", f"must be 1 to 255 characters, got {self.registry_name!r}"
            )
        if self.compatibility not in COMPATIBILITY_MODES:
            raise ConfigurationError(
                "compatibility",
                f"must be one of {', '.join(sorted(COMPATIBILITY_MODES))}, "
                f"got {self.compatibility!r}",
            )
        if not self.unavailable_ttl >= 0:
            raise ConfigurationError(
                "unavailable_ttl", f"must be >= 0 seconds, got {self.unavailable_ttl!r}"
            )


@dataclass(frozen=True)
class SchemaVersion:
    """One version of a schema, as the registry gave it."""

    version_id: uuid.UUID
    data_format: DataFormat
    definition: str
    schema_name: str | None = None
    registry_name: str | None = None
    version_number: int | None = None
    status: str = "AVAILABLE"


class _Pending(Exception):
    """A new version still in its compatibility check: retried by :data:`PENDING_RETRY`
    (a code the error table does not know, with no status: transient)."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.response = {"Error": {"Code": "SchemaVersionPending", "Message": what}}


def _arn_names(arn: str | None) -> tuple[str | None, str | None]:
    """(registry, schema) of ``arn:aws:glue:REGION:ACCOUNT:schema/REGISTRY/SCHEMA``."""
    if not arn or "/" not in arn:
        return None, None
    parts = arn.split(":", 5)[-1].split("/")
    return (parts[1], parts[2]) if len(parts) >= 3 else (None, None)


def _code(exc: BaseException) -> str | None:
    return error_details(exc)[0]


@dataclass
class _Link:
    executor: AsyncExecutor
    stack: contextlib.AsyncExitStack
    inflight: dict[Hashable, asyncio.Future[Any]] = field(default_factory=dict)


class SchemaRegistry:
    """The Glue Schema Registry for this process's serializers and deserializers.

    ``async with SchemaRegistry(RegistryConfig(...)) as registry:`` or, from synchronous code,
    just make one and use the ``*_blocking`` methods (``close()`` it at the end). ``client``
    (an aiobotocore ``glue`` client, botocore's retries off) is used instead of making one;
    it serves the async methods on its own loop only. ``calls`` counts the calls sent, by
    operation (retries included).
    """

    def __init__(
        self,
        config: RegistryConfig | None = None,
        *,
        client: Any = None,
        clock: Clock = SYSTEM_CLOCK,
        **overrides: Any,
    ) -> None:
        self.config = replace(config or RegistryConfig(), **overrides)
        self._client = client
        self._clock = clock
        self._links: dict[asyncio.AbstractEventLoop, _Link] = {}
        self._by_definition: dict[tuple[str, DataFormat, str], SchemaVersion] = {}
        self._by_id: dict[bytes, SchemaVersion] = {}
        self._missing: dict[bytes, tuple[float, SchemaRegistryError]] = {}
        self.calls: Counter[str] = Counter()

    _shared: dict[tuple[int, RegistryConfig], SchemaRegistry] = {}
    _shared_lock = threading.Lock()

    @classmethod
    def shared(cls, config: RegistryConfig) -> SchemaRegistry:
        """The process's registry for ``config`` (Beam's DoFns and serializers share it: one
        call per schema version per process); used through the ``*_blocking`` methods."""
        key = (os.getpid(), config)
        with cls._shared_lock:
            registry = cls._shared.get(key)
            if registry is None:
                registry = cls._shared[key] = cls(config)
            return registry

    # -- lifecycle --------------------------------------------------------------------------

    async def __aenter__(self) -> SchemaRegistry:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the client of the running loop (and, from outside it, of the loop thread)."""
        link = self._links.pop(asyncio.get_running_loop(), None)
        if link is not None:
            await link.stack.aclose()

    def close(self) -> None:
        """Close the loop thread's client (synchronous callers)."""
        thread = LoopThread.get()
        if thread.loop in self._links:
            thread.run(self._close_on(thread.loop))

    async def _close_on(self, loop: asyncio.AbstractEventLoop) -> None:
        link = self._links.pop(loop, None)
        if link is not None:
            await link.stack.aclose()

    async def _link(self) -> _Link:
        loop = asyncio.get_running_loop()
        link = self._links.get(loop)
        if link is None:
            stack = contextlib.AsyncExitStack()
            client = self._client
            if client is None:
                client = await stack.enter_async_context(self._create_client())
            link = self._links[loop] = _Link(AsyncExecutor(client, clock=self._clock), stack)
        return link

    def _create_client(self) -> contextlib.AbstractAsyncContextManager[Any]:
        from aiobotocore.config import AioConfig
        from aiobotocore.session import AioSession

        config = self.config.client_config or ClientConfig()
        session = AioSession(profile=config.profile_name)
        region = (
            config.region_name
            or session.get_config_variable("region")
            or os.environ.get("AWS_REGION")
        )
        if not region:
            raise ConfigurationError(
                "client_config",
                "no AWS region for the Glue client; pass ClientConfig(region_name=...) or set "
                "AWS_DEFAULT_REGION",
            )
        http = AioConfig(
            connect_timeout=config.connect_timeout,
            read_timeout=config.read_timeout,
            retries={"mode": "standard", "total_max_attempts": 1},
            user_agent_extra="kinesis-connectors",
        )
        client: contextlib.AbstractAsyncContextManager[Any] = session.create_client(
            "glue",
            region_name=region,
            endpoint_url=self.config.endpoint_url,
            verify=None if config.verify is True else config.verify,
            aws_access_key_id=config.aws_access_key_id,
            aws_secret_access_key=config.aws_secret_access_key,
            aws_session_token=config.aws_session_token,
            config=http,
        )
        return client

    async def _execute(self, call: ApiCall, retry: RetryPolicy | None = None) -> Any:
        link = await self._link()
        policy = retry or self.config.retry

        async def send() -> Any:
            self.calls[call.operation] += 1
            return await link.executor.execute(call)

        return await link.executor.attempt(send, policy, call.what)

    async def _once(self, key: Hashable, fetch: Callable[[], Awaitable[_T]]) -> _T:
        """``fetch()``, shared by the callers asking for ``key`` at the same time."""
        link = await self._link()
        future = link.inflight.get(key)
        if future is not None:
            result: _T = await asyncio.shield(future)
            return result
        future = asyncio.get_running_loop().create_future()
        link.inflight[key] = future
        try:
            value = await fetch()
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: the waiters, if any, raise it
            raise
        else:
            future.set_result(value)
            return value
        finally:
            del link.inflight[key]

    # -- writers: a definition's version ------------------------------------------------------

    def cached(self, schema: Schema, schema_name: str) -> SchemaVersion | None:
        """The version of ``schema_name`` with ``schema``'s definition, if this process knows
        it (no call)."""
        return self._by_definition.get((schema_name, schema.data_format, schema.definition))

    async def version_of(self, schema: Schema, schema_name: str) -> SchemaVersion:
        """The version of ``schema_name`` whose definition is ``schema``'s (registered first
        with ``auto_register``). Raises :class:`SchemaNotRegisteredError`,
        :class:`SchemaCompatibilityError` or :class:`SchemaRegistryError`."""
        key = (schema_name, schema.data_format, schema.definition)
        version = self._by_definition.get(key)
        if version is None:
            version = await self._once(key, lambda: self._look_up(schema, schema_name))
            self._by_definition[key] = version
            self._by_id.setdefault(version.version_id.bytes, version)
        return version

    def version_of_blocking(self, schema: Schema, schema_name: str) -> SchemaVersion:
        """:meth:`version_of` from synchronous code (on the process's loop thread)."""
        return self.cached(schema, schema_name) or LoopThread.get().run(
            self.version_of(schema, schema_name)
        )

    async def _look_up(self, schema: Schema, schema_name: str) -> SchemaVersion:
        registry = self.config.registry_name
        try:
            found = await self._execute(
                GetSchemaByDefinition(registry, schema_name, schema.definition)
            )
        except Exception as exc:
            if _code(exc) != NOT_FOUND:
                raise SchemaRegistryError(
                    f"cannot look up schema {registry}/{schema_name}: {error_message(exc)}"
                ) from exc
            if not self.config.auto_register:
                raise SchemaNotRegisteredError(
                    f"schema {registry}/{schema_name} has no version with this definition "
                    f"({schema!r}), and auto_register is off: register it, or set "
                    "RegistryConfig(auto_register=True)"
                ) from exc
            return await self._register(schema, schema_name)
        status = found.get("Status", "AVAILABLE")
        version_id = uuid.UUID(found["SchemaVersionId"])
        if status == "PENDING":
            status = await self._settled(version_id, schema_name)
        if status != "AVAILABLE":
            await self._refused(schema_name, version_id, status, None)
        return SchemaVersion(
            version_id, schema.data_format, schema.definition, schema_name, registry
        )

    async def _register(self, schema: Schema, schema_name: str) -> SchemaVersion:
        registry = self.config.registry_name
        try:
            answer = await self._execute(
                RegisterSchemaVersion(registry, schema_name, schema.definition)
            )
            status = answer.get("Status", "AVAILABLE")
            number = answer.get("VersionNumber")
        except Exception as exc:
            code = _code(exc)
            if code == NOT_FOUND:
                answer = await self._create(schema, schema_name)
                # CreateSchema's names; RegisterSchemaVersion's after a race (_create)
                status = answer.get("SchemaVersionStatus") or answer.get("Status", "AVAILABLE")
                number = answer.get("LatestSchemaVersion") or answer.get("VersionNumber")
            elif code == "InvalidInputException":
                await self._refused(schema_name, None, "refused", error_message(exc), exc)
            else:
                raise SchemaRegistryError(
                    f"cannot register a version of schema {registry}/{schema_name}: "
                    f"{error_message(exc)}"
                ) from exc
        version_id = uuid.UUID(answer["SchemaVersionId"])
        if status == "PENDING":
            status = await self._settled(version_id, schema_name)
        if status != "AVAILABLE":
            await self._refused(schema_name, version_id, status, None)
        logger.info("registered version %s of schema %s/%s", version_id, registry, schema_name)
        return SchemaVersion(
            version_id, schema.data_format, schema.definition, schema_name, registry, number
        )

    async def _create(self, schema: Schema, schema_name: str) -> Any:
        registry = self.config.registry_name
        call = CreateSchema(
            registry,
            schema_name,
            schema.data_format.value,
            self.config.compatibility,
            schema.definition,
        )
        try:
            return await self._execute(call)
        except Exception as exc:
            if _code(exc) == "AlreadyExistsException":  # another writer created it meanwhile
                return await self._execute(
                    RegisterSchemaVersion(registry, schema_name, schema.definition)
                )
            raise SchemaRegistryError(
                f"cannot create schema {registry}/{schema_name}: {error_message(exc)}"
            ) from exc

    async def _settled(self, version_id: uuid.UUID, schema_name: str) -> str:
        """The status of a new version once its compatibility check is over."""

        async def check() -> str:
            answer = await self._execute(GetSchemaVersion(str(version_id)))
            status: str = answer.get("Status", "AVAILABLE")
            if status == "PENDING":
                raise _Pending(f"version {version_id} of schema {schema_name} is PENDING")
            return status

        link = await self._link()
        return await link.executor.attempt(check, PENDING_RETRY, f"check of {version_id}")

    async def _refused(
        self,
        schema_name: str,
        version_id: uuid.UUID | None,
        status: str,
        detail: str | None,
        cause: BaseException | None = None,
    ) -> NoReturn:
        registry = self.config.registry_name
        try:
            compatibility = (await self._execute(GetSchema(registry, schema_name))).get(
                "Compatibility"
            )
        except Exception:  # the refusal is the news; the rule is a detail
            logger.debug("GetSchema of %s/%s failed", registry, schema_name, exc_info=True)
            compatibility = None
        what = f"version {version_id} is {status}" if version_id else "the registry refused it"
        raise SchemaCompatibilityError(
            f"schema {registry}/{schema_name}: the new definition breaks its compatibility "
            f"rule {compatibility or '(unknown)'} ({what}"
            f"{': ' + detail if detail else ''})",
            registry_name=registry,
            schema_name=schema_name,
            compatibility=compatibility,
        ) from cause

    # -- readers: a version by id -------------------------------------------------------------

    def cached_version(self, version_id: bytes) -> SchemaVersion | None:
        """The version whose id is these 16 bytes, if this process knows it (no call)."""
        return self._by_id.get(version_id)

    async def version(self, version_id: uuid.UUID | bytes) -> SchemaVersion:
        """The schema version ``version_id`` (16 bytes or a UUID), asked for once per process.
        Raises :class:`SchemaVersionUnavailableError` for one the registry does not have, and
        :class:`SchemaRegistryError` when it could not be asked (the retries ran out); either
        is raised again without a call for ``unavailable_ttl`` seconds."""
        key = version_id.bytes if isinstance(version_id, uuid.UUID) else bytes(version_id)
        version = self._by_id.get(key)
        if version is not None:
            return version
        missing = self._missing.get(key)
        if missing is not None and missing[0] > self._clock.now():
            raise missing[1]
        try:
            version = await self._once(key, lambda: self._fetch(uuid.UUID(bytes=key)))
        except SchemaRegistryError as exc:
            self._missing[key] = (self._clock.now() + self.config.unavailable_ttl, exc)
            raise
        self._by_id[key] = version
        return version

    def version_blocking(self, version_id: uuid.UUID | bytes) -> SchemaVersion:
        """:meth:`version` from synchronous code (on the process's loop thread)."""
        key = version_id.bytes if isinstance(version_id, uuid.UUID) else bytes(version_id)
        return self._by_id.get(key) or LoopThread.get().run(self.version(key))

    async def _fetch(self, version_id: uuid.UUID) -> SchemaVersion:
        try:
            answer = await self._execute(GetSchemaVersion(str(version_id)))
        except Exception as exc:
            if _code(exc) != NOT_FOUND:
                raise SchemaRegistryError(
                    f"cannot get schema version {version_id}: {error_message(exc)}"
                ) from exc
            raise self._unavailable(version_id, error_message(exc)) from exc
        status = answer.get("Status", "AVAILABLE")
        if status not in ("AVAILABLE", "DELETING"):
            raise self._unavailable(version_id, f"its status is {status}")
        registry, schema = _arn_names(answer.get("SchemaArn"))
        return SchemaVersion(
            version_id,
            DataFormat(answer["DataFormat"]),
            answer["SchemaDefinition"],
            schema,
            registry,
            answer.get("VersionNumber"),
            status,
        )

    def _unavailable(self, version_id: uuid.UUID, why: str) -> SchemaVersionUnavailableError:
        return SchemaVersionUnavailableError(
            f"schema version {version_id} is not in the registry ({why})"
        )
