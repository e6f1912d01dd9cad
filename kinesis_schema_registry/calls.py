"""The Glue Schema Registry calls, as values an executor sends (sans-I/O).

Each is an :class:`~kinesis_core.aws.calls.ApiCall` on aiobotocore's (or botocore's) ``glue``
client, so :class:`~kinesis_core.aws.executor.AsyncExecutor` runs it under a
:class:`~kinesis_core.aws.retry.RetryPolicy` like every Kinesis call: throttling
(``ThrottlingException``) and 5xx answers are retried by the policy, nothing here loops.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kinesis_core.aws.calls import ApiCall


def schema_id(registry_name: str, schema_name: str) -> dict[str, str]:
    return {"RegistryName": registry_name, "SchemaName": schema_name}


@dataclass(frozen=True, slots=True)
class _DefinitionCall(ApiCall):
    """A call about one definition of a schema."""

    registry_name: str
    schema_name: str
    definition: str

    def request(self, token: str | None) -> dict[str, Any]:
        return {
            "SchemaId": schema_id(self.registry_name, self.schema_name),
            "SchemaDefinition": self.definition,
        }

    @property
    def what(self) -> str:
        return f"{type(self).__name__} of {self.registry_name}/{self.schema_name}"


@dataclass(frozen=True, slots=True)
class GetSchemaByDefinition(_DefinitionCall):
    """The version of ``schema_name`` whose definition is ``definition`` (EntityNotFound if
    none)."""

    operation = "get_schema_by_definition"


@dataclass(frozen=True, slots=True)
class RegisterSchemaVersion(_DefinitionCall):
    """A new version of an existing schema (or the existing one with that definition)."""

    operation = "register_schema_version"


@dataclass(frozen=True, slots=True)
class CreateSchema(ApiCall):
    """A new schema with its first version."""

    operation = "create_schema"
    registry_name: str
    schema_name: str
    data_format: str
    compatibility: str
    definition: str

    def request(self, token: str | None) -> dict[str, Any]:
        return {
            "RegistryId": {"RegistryName": self.registry_name},
            "SchemaName": self.schema_name,
            "DataFormat": self.data_format,
            "Compatibility": self.compatibility,
            "SchemaDefinition": self.definition,
        }

    @property
    def what(self) -> str:
        return f"CreateSchema {self.registry_name}/{self.schema_name}"


@dataclass(frozen=True, slots=True)
class GetSchemaVersion(ApiCall):
    """A schema version by its id: definition, data format, schema ARN, status."""

    operation = "get_schema_version"
    version_id: str

    def request(self, token: str | None) -> dict[str, Any]:
        return {"SchemaVersionId": self.version_id}

    @property
    def what(self) -> str:
        return f"GetSchemaVersion {self.version_id}"


@dataclass(frozen=True, slots=True)
class GetSchema(ApiCall):
    """A schema: its compatibility rule, data format, latest version."""

    operation = "get_schema"
    registry_name: str
    schema_name: str

    def request(self, token: str | None) -> dict[str, Any]:
        return {"SchemaId": schema_id(self.registry_name, self.schema_name)}

    @property
    def what(self) -> str:
        return f"GetSchema {self.registry_name}/{self.schema_name}"
