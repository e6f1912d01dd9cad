"""An in-memory Glue Schema Registry with aiobotocore's face (the calls the registry client
makes), for unit tests: counts every call, and fails the next ones as told."""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

from botocore.exceptions import ClientError


def client_error(code: str, message: str, operation: str, status: int = 400) -> ClientError:
    return ClientError(
        {
            "Error": {"Code": code, "Message": message},
            "ResponseMetadata": {"HTTPStatusCode": status},
        },
        operation,
    )


class FakeGlue:
    """Schemas of one account: ``(registry, schema) -> {format, compatibility, versions}``;
    ``fail[operation]`` lists errors raised by the next calls of that operation;
    ``status`` is what RegisterSchemaVersion answers (AVAILABLE, FAILURE, PENDING then
    AVAILABLE on the next GetSchemaVersion)."""

    def __init__(self) -> None:
        self.schemas: dict[tuple[str, str], dict[str, Any]] = {}
        self.versions: dict[str, dict[str, Any]] = {}
        self.calls: Counter[str] = Counter()
        self.fail: dict[str, list[Exception]] = {}
        self.status = "AVAILABLE"

    def _call(self, operation: str) -> None:
        self.calls[operation] += 1
        pending = self.fail.get(operation)
        if pending:
            raise pending.pop(0)

    def _schema(self, schema_id: dict[str, str], operation: str) -> dict[str, Any]:
        key = (schema_id["RegistryName"], schema_id["SchemaName"])
        if key not in self.schemas:
            raise client_error("EntityNotFoundException", f"Schema is not found. {key}", operation)
        return self.schemas[key]

    def _add(self, key: tuple[str, str], definition: str, status: str) -> dict[str, Any]:
        schema = self.schemas[key]
        version = {
            "SchemaVersionId": str(uuid.uuid4()),
            "SchemaDefinition": definition,
            "DataFormat": schema["format"],
            "SchemaArn": f"arn:aws:glue:us-east-1:123456789012:schema/{key[0]}/{key[1]}",
            "VersionNumber": len(schema["versions"]) + 1,
            "Status": status,
        }
        schema["versions"].append(version)
        self.versions[version["SchemaVersionId"]] = version
        return version

    def add_schema(self, registry: str, name: str, data_format: str, definition: str) -> str:
        """A schema with one version (AVAILABLE); returns the version id."""
        self.schemas[(registry, name)] = {
            "format": data_format,
            "compatibility": "BACKWARD",
            "versions": [],
        }
        return str(self._add((registry, name), definition, "AVAILABLE")["SchemaVersionId"])

    async def get_schema_by_definition(self, SchemaId: Any, SchemaDefinition: str) -> Any:
        self._call("GetSchemaByDefinition")
        schema = self._schema(SchemaId, "GetSchemaByDefinition")
        for version in schema["versions"]:
            if version["SchemaDefinition"] == SchemaDefinition:
                return version
        raise client_error(
            "EntityNotFoundException", "Schema is not found.", "GetSchemaByDefinition"
        )

    async def register_schema_version(self, SchemaId: Any, SchemaDefinition: str) -> Any:
        self._call("RegisterSchemaVersion")
        schema = self._schema(SchemaId, "RegisterSchemaVersion")
        for version in schema["versions"]:
            if version["SchemaDefinition"] == SchemaDefinition:
                return version
        key = (SchemaId["RegistryName"], SchemaId["SchemaName"])
        return self._add(key, SchemaDefinition, self.status)

    async def create_schema(self, **kwargs: Any) -> Any:
        self._call("CreateSchema")
        key = (kwargs["RegistryId"]["RegistryName"], kwargs["SchemaName"])
        if key in self.schemas:
            raise client_error("AlreadyExistsException", "Schema already exists.", "CreateSchema")
        self.schemas[key] = {
            "format": kwargs["DataFormat"],
            "compatibility": kwargs["Compatibility"],
            "versions": [],
        }
        version = self._add(key, kwargs["SchemaDefinition"], "AVAILABLE")
        return {"SchemaVersionId": version["SchemaVersionId"], "SchemaVersionStatus": "AVAILABLE"}

    async def get_schema_version(self, SchemaVersionId: str) -> Any:
        self._call("GetSchemaVersion")
        version = self.versions.get(SchemaVersionId)
        if version is None:
            raise client_error(
                "EntityNotFoundException", "Schema version is not found.", "GetSchemaVersion"
            )
        if version["Status"] == "PENDING":
            version["Status"] = "AVAILABLE"
            return {**version, "Status": "PENDING"}
        return version

    async def get_schema(self, SchemaId: Any) -> Any:
        self._call("GetSchema")
        schema = self._schema(SchemaId, "GetSchema")
        return {"Compatibility": schema["compatibility"], "DataFormat": schema["format"]}
