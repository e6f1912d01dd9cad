"""What the schema registry's serde raises."""

from __future__ import annotations

from kinesis_core.errors import KinesisConnectorError


class SchemaRegistryError(KinesisConnectorError):
    """The registry refused or could not answer a call this serde needed (the service's
    error is the ``__cause__``; retries, if any, are in its ``__notes__``)."""


class SchemaNotRegisteredError(SchemaRegistryError):
    """A schema definition is not a version of the schema named, and auto-registration is
    off."""


class SchemaCompatibilityError(SchemaRegistryError):
    """The registry refused a new version of a schema: it breaks the schema's compatibility
    rule. ``schema_name`` and ``compatibility`` (BACKWARD, FULL, ...) say which."""

    def __init__(
        self, message: str, *, registry_name: str, schema_name: str, compatibility: str | None
    ) -> None:
        super().__init__(message)
        self.registry_name = registry_name
        self.schema_name = schema_name
        self.compatibility = compatibility


class SchemaVersionUnavailableError(SchemaRegistryError):
    """A record names a schema version the registry does not have (deleted, or another
    registry's), or one not AVAILABLE."""
